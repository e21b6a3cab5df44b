/* realstack FetchContent dependency (stands in for oneDNN) */
#define ONEDNN_VERSION "3.13"
