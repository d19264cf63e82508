# Note [Include roots]
#
# The modules are layered, each including only those before it:
#   core <- kernels <- trace <- serialization <- eager <- distributed
#   (docs/ARCHITECTURE.md)
# The build, not good will, keeps it so. No target sees the repository root;
# each module instead gets an include root of its own: a folder in the build
# tree holding one symbolic link, named like the module, to its sources. A
# module's root is PUBLIC, so the module and whatever links it reach
# "trace/graph.h"; a module links only the modules before it, so an include
# that points the wrong way ("core/tensor.h" including "kernels/...") is a
# "No such file" error at compile time. tests/layering checks that it is.
#
# kernels exposes only its top-level headers: cpu/, ops/ and cuda/ are its
# internals, which its own sources reach through a private root that links the
# whole folder, and everyone else cannot name.
#
# Tests, benchmarks and the difftest library add the repository root
# themselves: they may reach any module's internals.

# tandem_include_root(target module [TOP_LEVEL_HEADERS_ONLY])
function(tandem_include_root target module)
  cmake_parse_arguments(PARSE_ARGV 2 arg "TOP_LEVEL_HEADERS_ONLY" "" "")
  set(sources "${PROJECT_SOURCE_DIR}/${module}")
  set(root "${PROJECT_BINARY_DIR}/include_roots/${module}")
  if(NOT arg_TOP_LEVEL_HEADERS_ONLY)
    _tandem_link("${sources}" "${root}/${module}")
    target_include_directories(${target} PUBLIC "$<BUILD_INTERFACE:${root}>")
    return()
  endif()
  file(GLOB headers CONFIGURE_DEPENDS RELATIVE "${sources}" "${sources}/*.h")
  foreach(header IN LISTS headers)
    _tandem_link("${sources}/${header}" "${root}/${module}/${header}")
  endforeach()
  set(internal_root "${PROJECT_BINARY_DIR}/include_roots/${module}_internal")
  _tandem_link("${sources}" "${internal_root}/${module}")
  target_include_directories(${target}
    PRIVATE "${internal_root}"
    INTERFACE "$<BUILD_INTERFACE:${root}>")
endfunction()

# A symbolic link at `link` to `target`, made once (a header removed later
# leaves a dangling link, which includes as "No such file", as it should).
function(_tandem_link target link)
  if(IS_SYMLINK "${link}")
    return()
  endif()
  cmake_path(GET link PARENT_PATH parent)
  file(MAKE_DIRECTORY "${parent}")
  file(CREATE_LINK "${target}" "${link}" SYMBOLIC)
endfunction()
