# A pip wheel's LibTorch (site-packages/torch/include) also holds the headers of the
# third-party libraries PyTorch was built with: fmt, pybind11 and more, at the wheel's
# versions. Passed as include folders, they are searched before the system's and would
# shadow Debian's, which the libraries Sophon links were built with (spdlog against
# Debian's fmt). Sophon compiles against a folder of links instead: everything of LibTorch's
# include folder but the folders and headers named in SOPHON_SYSTEM_HEADERS, which then come
# from the system. A folder without any of them (Debian's LibTorch) is used as it is.

# What Sophon takes from Debian, by the name it has at the top of an include folder.
set(SOPHON_SYSTEM_HEADERS
  absl fmt spdlog google grpc grpcpp gtest gmock pybind11 openssl prometheus
  jpeglib.h jconfig.h jmorecfg.h jerror.h turbojpeg.h zlib.h zconf.h)

# sophon_filter_include_dir(<out-var> <dir> <links-root>): <dir> itself, or a folder under
# <links-root> with a link to each of its entries but those in SOPHON_SYSTEM_HEADERS.
function(sophon_filter_include_dir out dir links_root)
  set(hidden)
  foreach(name IN LISTS SOPHON_SYSTEM_HEADERS)
    if(EXISTS "${dir}/${name}")
      list(APPEND hidden ${name})
    endif()
  endforeach()
  if(NOT hidden)
    set(${out} "${dir}" PARENT_SCOPE)
    return()
  endif()
  string(MD5 key "${dir}")
  set(links "${links_root}/${key}")
  file(REMOVE_RECURSE "${links}")
  file(MAKE_DIRECTORY "${links}")
  file(GLOB entries RELATIVE "${dir}" "${dir}/*")
  foreach(entry IN LISTS entries)
    if(NOT entry IN_LIST hidden)
      file(CREATE_LINK "${dir}/${entry}" "${links}/${entry}" SYMBOLIC)
    endif()
  endforeach()
  list(JOIN hidden " " hidden_text)
  message(STATUS "LibTorch's ${dir} also holds ${hidden_text}: the system's are used "
                 "(LibTorch's headers through ${links})")
  set(${out} "${links}" PARENT_SCOPE)
endfunction()

# sophon_hide_bundled_headers(<targets>...): filters the include folders of LibTorch's
# imported targets (those that exist) through sophon_filter_include_dir. The system's own
# include folders and generator expressions are kept as they are.
function(sophon_hide_bundled_headers)
  foreach(target IN LISTS ARGN)
    if(NOT TARGET ${target})
      continue()
    endif()
    get_target_property(dirs ${target} INTERFACE_INCLUDE_DIRECTORIES)
    if(NOT dirs)
      continue()
    endif()
    set(filtered)
    foreach(dir IN LISTS dirs)
      get_filename_component(real "${dir}" REALPATH)
      if(dir MATCHES "^\\$<" OR real IN_LIST CMAKE_CXX_IMPLICIT_INCLUDE_DIRECTORIES
         OR NOT IS_DIRECTORY "${real}")
        list(APPEND filtered "${dir}")
      else()
        sophon_filter_include_dir(dir "${real}" "${CMAKE_BINARY_DIR}/torch-include")
        list(APPEND filtered "${dir}")
      endif()
    endforeach()
    set_target_properties(${target} PROPERTIES INTERFACE_INCLUDE_DIRECTORIES "${filtered}")
  endforeach()
endfunction()
