#!/bin/sh
# Create (or upgrade) Temporal's two PostgreSQL databases: run by the temporal-schema service (temporalio/admin-tools)
# before the server starts. Safe on every start: `create` skips an existing database, `setup-schema -v 0.0` skips a
# database that already has a newer schema, and `update-schema` applies only the versions not applied yet.
set -eu

: "${POSTGRES_SEEDS:?}" "${POSTGRES_USER:?}" "${SQL_PASSWORD:?}"
port="${DB_PORT:-5432}"
schemas=/etc/temporal/schema/postgresql/v12

for database in temporal temporal_visibility; do
  case "$database" in
    temporal) versions="$schemas/temporal/versioned" ;;
    *) versions="$schemas/visibility/versioned" ;;
  esac
  set -- --plugin postgres12 --ep "$POSTGRES_SEEDS" -u "$POSTGRES_USER" -p "$port" --db "$database"
  temporal-sql-tool "$@" create
  temporal-sql-tool "$@" setup-schema -v 0.0
  temporal-sql-tool "$@" update-schema -d "$versions"
done
echo "temporal schemas ready"
