/* Demo FetchContent dependency (stands in for sycl-tla / oneDNN headers). */
#ifndef DEMO_HEADERS_H
#define DEMO_HEADERS_H
#define DEMO_EPSILON 1e-6
#endif
