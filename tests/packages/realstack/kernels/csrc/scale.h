/* the kernels' scale (a regression changes it) */
#define KERNEL_SCALE 2.0
