# cmake -DSOURCE_DIR=<checkout> -P narrow_headers.cmake
# Headers that many files include stay free of gRPC and protobuf: the include closure of each
# header below (every "..." include found under the checkout, followed to the end; <...> and
# generated headers are named but not followed) names no gRPC header, no protobuf header and
# no generated message header (*.pb.h), and none of the loader's private headers. A change to
# the loader's internals or to the wire then rebuilds only the loader. Every offence is listed
# with the chain of includes that reaches it.
cmake_minimum_required(VERSION 3.22)
if(NOT SOURCE_DIR)
  message(FATAL_ERROR
    "narrow_headers: run as cmake -DSOURCE_DIR=<checkout> -P narrow_headers.cmake")
endif()

# The narrow faces, and what their closure must not name (regular expressions on the include
# as written).
set(headers client/loader/loader.h)
set(forbidden "grpc" "\\.pb\\.h$" "^google/protobuf/" "^client/loader/sample_client\\.h$"
  "^client/loader/server_set\\.h$" "^client/loader/stream_loader\\.h$"
  "^client/loader/server_link\\.h$")

set(offences "")
foreach(header IN LISTS headers)
  if(NOT EXISTS "${SOURCE_DIR}/${header}")
    message(FATAL_ERROR "narrow_headers: ${header} not found under ${SOURCE_DIR}")
  endif()
  # Breadth first over the closure; chain_<file> is how <file> was reached.
  set(queue "${header}")
  set(seen "${header}")
  set(chain_${header} "${header}")
  while(queue)
    list(POP_FRONT queue file)
    file(STRINGS "${SOURCE_DIR}/${file}" lines REGEX "^[ \t]*#[ \t]*include[ \t]*[<\"]")
    foreach(line IN LISTS lines)
      string(REGEX REPLACE "^[ \t]*#[ \t]*include[ \t]*[<\"]([^>\"]+)[>\"].*$" "\\1" name "${line}")
      foreach(pattern IN LISTS forbidden)
        if(name MATCHES "${pattern}")
          list(APPEND offences "${chain_${file}} -> ${name}")
          break()
        endif()
      endforeach()
      if(NOT line MATCHES "\"")
        continue()
      endif()
      # A project header: under the checkout or its include/ folder.
      get_filename_component(dir "${file}" DIRECTORY)
      set(found "")
      foreach(candidate "${name}" "include/${name}" "${dir}/${name}")
        if(EXISTS "${SOURCE_DIR}/${candidate}" AND NOT IS_DIRECTORY "${SOURCE_DIR}/${candidate}")
          set(found "${candidate}")
          break()
        endif()
      endforeach()
      if(found AND NOT found IN_LIST seen)
        list(APPEND seen "${found}")
        list(APPEND queue "${found}")
        set(chain_${found} "${chain_${file}} -> ${found}")
      endif()
    endforeach()
  endwhile()
  list(LENGTH seen count)
  message(STATUS "narrow_headers: ${header}: ${count} project headers in its closure")
endforeach()

if(offences)
  list(JOIN offences "\n  " listed)
  message(FATAL_ERROR
    "narrow_headers: a narrow header reaches a heavy or private one:\n  ${listed}")
endif()
message(STATUS "narrow_headers: passed")
