# cmake -DSOURCE_DIR=<checkout> -DWORK_DIR=<scratch> -P torch_headers_test.cmake
# A wheel-like LibTorch include folder (LibTorch's own folders beside fmt/, pybind11/ and a
# header Debian does not have) filtered by cmake/SophonTorchHeaders.cmake: LibTorch's
# headers and the header Debian lacks stay reachable, fmt/ and pybind11/ do not; a folder
# without bundled headers is used as it is.
cmake_minimum_required(VERSION 3.22)
include(${SOURCE_DIR}/cmake/SophonTorchHeaders.cmake)
set(wheel "${WORK_DIR}/site-packages/torch/include")
file(REMOVE_RECURSE "${WORK_DIR}")
foreach(f torch/torch.h c10/core/Device.h ATen/ATen.h fmt/format.h pybind11/pybind11.h cpuinfo.h)
  file(WRITE "${wheel}/${f}" "// ${f}\n")
endforeach()
file(WRITE "${WORK_DIR}/plain/include/torch/torch.h" "")

# expect(<what> <condition>...): fails naming <what> unless the condition holds.
macro(expect what)
  if(NOT (${ARGN}))
    message(FATAL_ERROR "torch_headers_test: expected ${what}")
  endif()
endmacro()

sophon_filter_include_dir(out "${wheel}" "${WORK_DIR}/links")
expect("a folder of links for ${wheel}, got ${out}" NOT out STREQUAL wheel)
foreach(f torch/torch.h c10/core/Device.h ATen/ATen.h cpuinfo.h)
  expect("${f} reachable through ${out}" EXISTS "${out}/${f}")
endforeach()
foreach(f fmt pybind11)
  expect("${f} hidden in ${out}" NOT EXISTS "${out}/${f}")
endforeach()
file(READ "${out}/torch/torch.h" text)
expect("the link to read the wheel's torch/torch.h" text STREQUAL "// torch/torch.h\n")

sophon_filter_include_dir(out2 "${WORK_DIR}/plain/include" "${WORK_DIR}/links")
expect("a folder without bundled headers unchanged, got ${out2}" out2 STREQUAL "${WORK_DIR}/plain/include")
message(STATUS "torch_headers_test: passed")
