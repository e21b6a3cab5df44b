/* realstack FetchContent dependency (stands in for sycl-tla) */
#define CUTLASS_REVISION "pinned"
