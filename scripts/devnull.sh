# Sourced by .ci/run, scripts/test and scripts/build-aarch64 (bash).
#
# cargo asks rustc about the target by running `rustc -` with its stdin on
# /dev/null. Some sandboxes have a regular file at /dev/null: whatever an
# earlier program sent "to /dev/null" stays there (a build script's failed
# feature probe writes its error message), rustc reads it back as source,
# and every later cargo call stops with "failed to run `rustc` to learn
# about target-specific information". `devnull_reset` empties such a file;
# call it before each cargo command. On a normal machine it does nothing.
devnull_reset() {
  [ -c /dev/null ] && return 0
  if [ -z "${SLMCC_DEVNULL_NOTED:-}" ]; then
    echo "note: /dev/null is a regular file here; it is emptied before each cargo command" >&2
    export SLMCC_DEVNULL_NOTED=1
  fi
  : > /dev/null
}
