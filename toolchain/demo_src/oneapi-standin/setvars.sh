# STAND-IN for Intel oneAPI setvars.sh, used by the demo recipe and the tests. It is NOT oneAPI:
# it only exports what the builds read (CMPLR_ROOT, ONEAPI_ROOT, PATH) and puts a fake `icpx` on PATH
# that prints a version banner in the real format. Like the real script it skips a second sourcing
# unless --force is given. It also stands in for the torch XPU wheel a real build environment has installed:
# torch-site/ (put on PYTHONPATH) holds `standin-torch 2.14.0+xpu`, which is NOT torch either. Like the real
# script it sources a file per component (compiler/env/vars.sh, a stand-in too: it sets CMPLR_ROOT).
if [ -n "${SETVARS_COMPLETED:-}" ] && [ "${1:-}" != "--force" ]; then
  echo ":: WARNING: setvars.sh has already been run. Skipping re-execution."
  return 0 2>/dev/null || exit 0
fi
_standin_root="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
export ONEAPI_ROOT="$_standin_root"
. "$_standin_root/compiler/env/vars.sh"
export PATH="$_standin_root/bin:$PATH"
export TOOLCHAIN_ONEAPI_STANDIN=1
export PYTHONPATH="$_standin_root/torch-site${PYTHONPATH:+:$PYTHONPATH}"
export SETVARS_COMPLETED=1
unset _standin_root
echo ":: oneAPI environment initialized :: (stand-in for tests and the demo)"
