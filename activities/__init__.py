"""The orchestration worker and its CPU-side activities: generation, clip decoding, upload checks, assembly and
platform exports. The artifact store they read and write is the shared core's (:mod:`core.artifacts`).
"""
