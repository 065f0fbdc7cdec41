"""What every popcon process shares: settings by role, the artifact store, the Temporal connection, logging."""
