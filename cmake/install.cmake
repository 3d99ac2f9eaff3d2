# `cmake --install BUILD [--prefix P]`: what dlcache installs, by component.
#
#   runtime  bin/dlcached, bin/dlcachectl, lib/libdlcache_c.so (the C ABI,
#            for ctypes and other FFI users; with its unversioned name)
#   headers  include/dlcache/: client.h, dlcache_c.h, dlcache_cuda_c.h,
#            version.h, and cuda/ and torch/ where those adapters are built
#   devel    the static client libraries (libdlcache_client.a with the
#            libdlcache_common.a it needs, libdlcache_c.a) and the CMake
#            package: lib/cmake/dlcache/dlcacheConfig.cmake,
#            dlcacheConfigVersion.cmake and the exported targets
#   python   the Python package (client/python/CMakeLists.txt)
#
# A project outside the tree then builds with
#   find_package(dlcache CONFIG REQUIRED)
#   target_link_libraries(app PRIVATE dlcache::client)  # C++ API, static
#   target_link_libraries(app PRIVATE dlcache::c)       # C ABI, .so
# (dlcache::c_static: the C ABI as a static library). tests/install_consumer/
# is such a project; the install_consumer test builds it against a fresh
# install.
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

set(DLCACHE_INSTALL_CMAKEDIR "${CMAKE_INSTALL_LIBDIR}/cmake/dlcache" CACHE
    STRING "Where dlcacheConfig.cmake is installed, under the prefix")

if(TARGET dlcached)
  install(TARGETS dlcached RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR}
    COMPONENT runtime)
endif()

if(NOT TARGET dlcache_client)
  return()
endif()

install(TARGETS dlcachectl RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR}
  COMPONENT runtime)

# Exported names: dlcache::client, dlcache::c, dlcache::c_static (and what
# the static ones need at link time: common, xxhash, version).
set_target_properties(dlcache_c_shared PROPERTIES EXPORT_NAME c)
set_target_properties(dlcache_c PROPERTIES EXPORT_NAME c_static)
set_target_properties(dlcache_client PROPERTIES EXPORT_NAME client)
set_target_properties(dlcache_common PROPERTIES EXPORT_NAME common)
set_target_properties(dlcache_xxhash PROPERTIES EXPORT_NAME xxhash)
set_target_properties(dlcache_version PROPERTIES EXPORT_NAME version)

install(TARGETS dlcache_c_shared EXPORT dlcacheTargets
  LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR} COMPONENT runtime
    NAMELINK_COMPONENT runtime
  INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(TARGETS dlcache_client dlcache_common dlcache_c dlcache_xxhash
                dlcache_version
  EXPORT dlcacheTargets
  ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR} COMPONENT devel
  INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})

install(DIRECTORY ${PROJECT_SOURCE_DIR}/client/include/dlcache
  DESTINATION ${CMAKE_INSTALL_INCLUDEDIR} COMPONENT headers
  FILES_MATCHING PATTERN "*.h")
install(FILES ${PROJECT_BINARY_DIR}/gen/dlcache/version.h
  DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/dlcache COMPONENT headers)
if(TARGET dlcache_cuda_uploader)
  install(DIRECTORY ${PROJECT_SOURCE_DIR}/client/cuda/include/dlcache
    DESTINATION ${CMAKE_INSTALL_INCLUDEDIR} COMPONENT headers
    FILES_MATCHING PATTERN "*.h")
endif()
if(TARGET dlcache_torch)
  install(DIRECTORY ${PROJECT_SOURCE_DIR}/client/torch/include/dlcache
    DESTINATION ${CMAKE_INSTALL_INCLUDEDIR} COMPONENT headers
    FILES_MATCHING PATTERN "*.h")
endif()

install(EXPORT dlcacheTargets NAMESPACE dlcache::
  FILE dlcacheTargets.cmake
  DESTINATION ${DLCACHE_INSTALL_CMAKEDIR} COMPONENT devel)
configure_package_config_file(
  ${PROJECT_SOURCE_DIR}/cmake/dlcacheConfig.cmake.in
  ${PROJECT_BINARY_DIR}/cmake/dlcacheConfig.cmake
  INSTALL_DESTINATION ${DLCACHE_INSTALL_CMAKEDIR})
# 0.x: a minor release may break the API, so only the same minor matches.
write_basic_package_version_file(
  ${PROJECT_BINARY_DIR}/cmake/dlcacheConfigVersion.cmake
  VERSION ${PROJECT_VERSION} COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/cmake/dlcacheConfig.cmake
              ${PROJECT_BINARY_DIR}/cmake/dlcacheConfigVersion.cmake
  DESTINATION ${DLCACHE_INSTALL_CMAKEDIR} COMPONENT devel)
