# cmake -DSOURCE_DIR=<checkout> -P include_layers.cmake
# The folder order of ARCHITECTURE.md's Folders table holds in the code: a file of a folder
# includes headers of its own folder and of the folders above it in the table only. The table
# is read from ARCHITECTURE.md (its first column, top to bottom), so the map stays the one
# place that states the order. A folder `<f>/` holds `<f>/`, `include/sophon/<f>/` and
# `src/<f>/` (included as "<f>/...", "sophon/<f>/..." and "src/<f>/..."); `protos/<p>/` is
# included as "<p>/..." (generated code). Programs wire the libraries and may include any
# folder: every `main.cc` and `*_main.cc`, and `server/cli/` (built into `sophon-server`
# alone, never into its library). Every offence is listed as `file:line: #include "..."`.
cmake_minimum_required(VERSION 3.22)
if(NOT SOURCE_DIR)
  message(FATAL_ERROR "include_layers: run as cmake -DSOURCE_DIR=<checkout> -P include_layers.cmake")
endif()
set(map "${SOURCE_DIR}/ARCHITECTURE.md")
file(READ "${map}" text)

# The Folders section: from its heading to the next second-level heading.
string(FIND "${text}" "\n## Folders\n" begin)
if(begin EQUAL -1)
  message(FATAL_ERROR "include_layers: no '## Folders' section in ${map}")
endif()
string(SUBSTRING "${text}" ${begin} -1 text)
string(SUBSTRING "${text}" 1 -1 rest)
string(FIND "${rest}" "\n## " end)
if(NOT end EQUAL -1)
  string(SUBSTRING "${rest}" 0 ${end} text)
endif()
# Table rows whose first cell is one code span: | `client/loader/` | ...
string(REGEX MATCHALL "\n\\| `[^`\n]+` \\|" rows "${text}")
set(folders "")
foreach(row IN LISTS rows)
  string(REGEX REPLACE "^\n\\| `([^`\n]+)` \\|$" "\\1" folder "${row}")
  list(APPEND folders "${folder}")
endforeach()
list(LENGTH folders count)
if(count LESS 5)
  message(FATAL_ERROR "include_layers: read ${count} folders from the Folders table of ${map} "
    "(${folders}); expected rows starting | `<folder>/` |")
endif()

# For each folder (by its index in the table): the path prefixes of its files and of its
# includes.
set(index 0)
foreach(folder IN LISTS folders)
  set(file_prefixes_${index} "${folder}")
  set(include_prefixes_${index} "")
  if(folder MATCHES "/$")
    if(folder MATCHES "^protos/(.+)$")
      list(APPEND include_prefixes_${index} "${CMAKE_MATCH_1}")
    else()
      list(APPEND file_prefixes_${index} "include/sophon/${folder}" "src/${folder}")
      list(APPEND include_prefixes_${index} "${folder}" "sophon/${folder}" "src/${folder}")
    endif()
  endif()
  math(EXPR index "${index} + 1")
endforeach()
math(EXPR last "${count} - 1")

# folder_of(<out> <path> <kind>): the index of the folder whose <kind> prefixes (file or
# include) hold <path>, the longest prefix winning; -1 for none.
function(folder_of out path kind)
  set(best -1)
  set(best_length 0)
  foreach(i RANGE ${last})
    foreach(prefix IN LISTS ${kind}_prefixes_${i})
      string(LENGTH "${prefix}" length)
      string(SUBSTRING "${path}" 0 ${length} head)
      if(head STREQUAL prefix AND length GREATER best_length)
        set(best ${i})
        set(best_length ${length})
      endif()
    endforeach()
  endforeach()
  set(${out} ${best} PARENT_SCOPE)
endfunction()

# Every source under the table's folders, plus every folder of include/sophon/, src/ and
# client/, so that a folder missing from the table is reported rather than left unchecked.
set(globs "")
foreach(i RANGE ${last})
  foreach(prefix IN LISTS file_prefixes_${i})
    if(prefix MATCHES "/$")
      list(APPEND globs "${SOURCE_DIR}/${prefix}*.h" "${SOURCE_DIR}/${prefix}*.cc")
    endif()
  endforeach()
endforeach()
foreach(root include/sophon src client)
  list(APPEND globs "${SOURCE_DIR}/${root}/*.h" "${SOURCE_DIR}/${root}/*.cc")
endforeach()
file(GLOB_RECURSE sources RELATIVE "${SOURCE_DIR}" ${globs})
list(REMOVE_DUPLICATES sources)
list(SORT sources)

set(offences "")
set(unmapped "")
set(checked 0)
foreach(source IN LISTS sources)
  get_filename_component(name "${source}" NAME)
  if(name STREQUAL "main.cc" OR name MATCHES "_main\\.cc$" OR source MATCHES "^server/cli/")
    continue()  # a program
  endif()
  folder_of(own "${source}" file)
  if(own EQUAL -1)
    list(APPEND unmapped "${source}")
    continue()
  endif()
  math(EXPR checked "${checked} + 1")
  file(STRINGS "${SOURCE_DIR}/${source}" includes REGEX "^[ \t]*#[ \t]*include[ \t]*\"[^\"]+\"")
  foreach(line IN LISTS includes)
    string(REGEX REPLACE "^[ \t]*#[ \t]*include[ \t]*\"([^\"]+)\".*$" "\\1" header "${line}")
    folder_of(theirs "${header}" include)
    if(theirs GREATER own)
      # The line number, only for an offence.
      file(READ "${SOURCE_DIR}/${source}" content)
      string(FIND "${content}" "${line}" at)
      string(SUBSTRING "${content}" 0 ${at} before)
      string(REGEX MATCHALL "\n" newlines "${before}")
      list(LENGTH newlines number)
      math(EXPR number "${number} + 1")
      list(GET folders ${own} own_name)
      list(GET folders ${theirs} their_name)
      list(APPEND offences
        "  ${source}:${number}: #include \"${header}\" (${own_name} includes ${their_name}, which comes after it)")
    endif()
  endforeach()
endforeach()

set(report "")
if(unmapped)
  list(JOIN unmapped "\n  " files)
  string(APPEND report "files in no folder of the Folders table of ${map} (add the folder's row):\n  ${files}\n")
endif()
if(offences)
  list(JOIN offences "\n" lines)
  string(APPEND report "includes of a folder that comes later in the Folders table of ${map} "
    "(a folder only depends on the folders above it):\n${lines}\n")
endif()
if(report)
  message(FATAL_ERROR "include_layers: failed\n${report}")
endif()
list(JOIN folders ", " order)
message(STATUS "include_layers: passed, ${checked} files in ${count} folders, in this order: ${order}")
