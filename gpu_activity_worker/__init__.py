"""Everything that touches a matting model: engines, pipelines, the GPU-queue activities and their worker."""
