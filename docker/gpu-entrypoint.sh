#!/bin/sh
# Entry point of the GPU image: what the container runs is its first argument.
#   handler  the RunPod Serverless handler (the default; RunPod starts the image with no argument)
#   worker   the Temporal GPU worker on task queue emoji-gpu (a RunPod Pod, or any CUDA machine)
#   other    run as given, e.g. `python -m gpu_activity_worker.fetch_weights sam2.1-hiera-tiny`
# Arguments after handler / worker go to the program, e.g. `handler --rp_serve_api` for RunPod's local test server.
set -eu

mode="${1:-handler}"
[ "$#" -gt 0 ] && shift
case "$mode" in
  handler) exec python -m gpu_activity_worker.runpod.handler "$@" ;;
  worker) exec python -m gpu_activity_worker "$@" ;;
  *) exec "$mode" "$@" ;;
esac
