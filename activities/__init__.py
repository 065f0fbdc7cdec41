"""CPU-side activities (generation, assembly), the artifact store and the orchestration worker."""
