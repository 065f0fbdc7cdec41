"""The GPU queue served by a RunPod Serverless endpoint: the wire format of a job (:mod:`.jobs`), the hosted queue
client (:mod:`.api`), the dispatcher on the GPU queue (:mod:`.dispatcher`), the handler on the endpoint's workers
(:mod:`.handler`), and deploying and smoke-testing the endpoint (:mod:`.provision`)."""
