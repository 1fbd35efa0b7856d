#!/bin/sh
# Run by `almanac run` once per slot. The slot is in the environment:
# ALMANAC_SLOT (2026-03-01T10:00:00Z/PT5M), ALMANAC_SLOT_START, ALMANAC_SLOT_END,
# ALMANAC_ATTEMPT, ALMANAC_FENCE, ALMANAC_KEY; REPORT_DIR only when passed
# with --env REPORT_DIR (the environment is minimal). Exit 0 completes the slot,
# 99 skips it, anything else is a failure retried with backoff (the tail of
# stderr becomes the slot's message).
set -eu
out="${REPORT_DIR:-/tmp/almanac-reports}"
mkdir -p "$out"
# One file per slot, written atomically: a re-run (after a crash, or a
# re-open) replaces it instead of adding a second one.
name=$(printf '%s' "$ALMANAC_SLOT_START" | tr ':' '-')
printf 'slot=%s attempt=%s fence=%s\n' "$ALMANAC_SLOT" "$ALMANAC_ATTEMPT" "$ALMANAC_FENCE" > "$out/.$name.tmp"
mv "$out/.$name.tmp" "$out/$name.txt"
echo "wrote $out/$name.txt"
