#!/bin/sh
# Doxygen's filter for the headers (docs/Doxyfile): tools/doxygen_filter.py's output for the
# header $1. Doxygen runs it once per header, and Python takes from 20 ms to half a second to
# start, so tools/check_reference.py filters them all in one process first, into
# $TP_DOCS_DIR/filtered/<the header's absolute path>; a header edited since is filtered here.
copy="$TP_DOCS_DIR/filtered$1"
if [ -n "$TP_DOCS_DIR" ] && [ "$copy" -nt "$1" ]; then exec cat "$copy"; fi
exec python3 "$(dirname "$0")/doxygen_filter.py" "$1"
