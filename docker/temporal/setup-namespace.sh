#!/bin/sh
# Create the namespace and register the EmojiSet search attributes (workflows/search_attributes.py): run by the
# temporal-init service once the server answers, before any worker starts. Safe to repeat.
set -eu

address="${TEMPORAL_ADDRESS:-temporal:7233}"
namespace="${NAMESPACE:-default}"

attempt=0
until temporal operator cluster health --address "$address" >/dev/null 2>&1; do
  attempt=$((attempt + 1))
  if [ "$attempt" -ge 60 ]; then
    echo "Temporal at $address is not healthy after $attempt attempts" >&2
    exit 1
  fi
  sleep 2
done

if ! temporal operator namespace describe --namespace "$namespace" --address "$address" >/dev/null 2>&1; then
  temporal operator namespace create --namespace "$namespace" --address "$address"
fi

existing="$(temporal operator search-attribute list --namespace "$namespace" --address "$address")"
for attribute in EmojiSetPhase:Keyword EmojiSetFramesDone:Int EmojiSetFramesTotal:Int EmojiSetOwner:Keyword EmojiSetAwaiting:KeywordList; do
  name="${attribute%%:*}"
  if printf '%s\n' "$existing" | grep -qw "$name"; then
    echo "search attribute $name already registered"
  else
    temporal operator search-attribute create --namespace "$namespace" --address "$address" \
      --name "$name" --type "${attribute#*:}"
  fi
done
echo "namespace $namespace ready"
