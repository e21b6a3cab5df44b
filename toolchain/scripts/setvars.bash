# Sources a oneAPI setvars.sh (or its stand-in) and reports what it did, run as
#   bash -c "$(this file's text)" toolchain-setvars SETVARS [ARGS...]
# stdout: the environment before (env -0), a mark, every file sourced while setvars ran (absolute paths,
# NUL-ended, in order), a mark, the environment after. setvars' own output goes to stderr.
# `source`, `.` and `command .` are wrapped as functions that log the path (resolved as bash resolves it: a name without a
# slash is looked up on PATH, then in the working folder) and call the builtin; a file sourced without
# arguments gets its caller's positional parameters, as with the builtin (read from BASH_ARGV, kept with
# extdebug).
set +u
env -0
printf '\0__TOOLCHAIN_SETVARS__\0'
exec 9>&1
shopt -s extdebug
__toolchain_where() {
  local name="$1" dir
  case "$name" in
    /*) printf '%s\0' "$name" ;;
    */*) printf '%s\0' "$PWD/$name" ;;
    *)
      if shopt -q sourcepath; then
        local IFS=:
        for dir in $PATH; do
          if [ -f "${dir:-.}/$name" ]; then
            case "${dir:-.}" in /*) printf '%s\0' "$dir/$name" ;; *) printf '%s\0' "$PWD/${dir:-.}/$name" ;; esac
            return
          fi
        done
      fi
      printf '%s\0' "$PWD/$name" ;;
  esac
}
__toolchain_source() {  # BUILTIN FILE [ARGS...]: log FILE, then source it with the builtin
  [ $# -gt 1 ] && __toolchain_where "$2" >&9
  if [ $# -eq 2 ]; then  # no arguments: the caller's own (frame 2: this, the wrapper, its caller)
    local -a __toolchain_args=()
    local __toolchain_i
    for ((__toolchain_i = BASH_ARGC[0] + BASH_ARGC[1] + BASH_ARGC[2] - 1;
          __toolchain_i >= BASH_ARGC[0] + BASH_ARGC[1]; __toolchain_i--)); do
      __toolchain_args+=("${BASH_ARGV[__toolchain_i]}")
    done
    builtin "$1" "$2" "${__toolchain_args[@]}"
    return
  fi
  builtin "$1" "${@:2}"
}
source() { __toolchain_source source "$@"; }
.() { __toolchain_source . "$@"; }
command() {  # `command . FILE` (which skips functions) is sourced through the wrapper too
  case "${1:-}" in
    .|source) __toolchain_source "$@" ;;
    *) builtin command "$@" ;;
  esac
}
script="$1"; shift
builtin source "$script" "$@" 1>&2 || { rc=$?; echo "setvars: $script exited with $rc" >&2; exit $rc; }
exec 9>&-
unset -f source . command __toolchain_source __toolchain_where
printf '\0__TOOLCHAIN_SETVARS__\0'
env -0
