# STAND-IN for a oneAPI component's env/vars.sh, sourced by the stand-in setvars.sh as the real setvars.sh
# sources <component>/latest/env/vars.sh for each component it finds. It is NOT oneAPI: it only exports the
# compiler root and the stand-in compiler's version (the tests rewrite it to see a sourced file re-checked).
_standin_compiler_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
export CMPLR_ROOT="$_standin_compiler_root"
export TOOLCHAIN_STANDIN_COMPILER="2025.2.0"
unset _standin_compiler_root
