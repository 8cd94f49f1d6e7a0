#!/usr/bin/env bash
# scripts/phase.sh NAME COMMAND [ARG...]: run COMMAND, then say how long phase NAME took.
# The line goes to stderr and, when FLOWLEDGER_PHASE_LOG names a file, into it too, so .ci/run can
# print every phase's time again at the end of its log. The exit status is COMMAND's.
set -uo pipefail
name=$1
shift
start=$(date +%s)
"$@"
status=$?
elapsed=$(($(date +%s) - start))
line=$(printf '%-16s %4d s' "$name" "$elapsed")
if [ "$status" -ne 0 ]; then line="$line (failed, exit $status)"; fi
echo "phase: $line" >&2
if [ -n "${FLOWLEDGER_PHASE_LOG:-}" ]; then echo "$line" >>"$FLOWLEDGER_PHASE_LOG"; fi
exit "$status"
