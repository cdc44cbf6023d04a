/* Sophon's jpeg8 API check (CMake target sophon_jpeg8_api_check): the system's
 * jconfig.h with JPEG_LIB_VERSION raised to 80, so that jpeglib.h declares the
 * structures of the jpeg7/8 API (as Ubuntu's libjpeg-turbo8-dev does) and the
 * sources that use libjpeg are compiled against them. Compile only: the
 * library itself keeps its own ABI. */
#include_next <jconfig.h>
#undef JPEG_LIB_VERSION
#define JPEG_LIB_VERSION 80
