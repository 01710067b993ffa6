# install.cmake - what `make install` / `cmake --install` puts where
# (included by CMakeLists.txt after the targets are defined).
#
#   PREFIX/bin/meganeura                      the program (static: needs no library at run time)
#   PREFIX/LIBDIR/libmeganeura.so.X.Y.Z      the shared library (soname libmeganeura.so.X), and
#   PREFIX/LIBDIR/libmeganeura.so            its development link
#   PREFIX/LIBDIR/libmeganeura.a             the static library
#   PREFIX/LIBDIR/pkgconfig/meganeura.pc     for `pkg-config --cflags --libs meganeura`
#   PREFIX/include/*.h                       every header of include/ (meganeura.h, meganeura_models.h, ...)
#   PREFIX/share/man/man1/meganeura.1
#   PREFIX/lib/python3/dist-packages/meganeura/   the Python package (MN_PYTHON_DIR)
#
# The prefix is the one given at install time (`cmake --install B --prefix P`,
# `make install PREFIX=P`), not only the configured one: meganeura.pc and the
# Python package's record of the library are written during the install.
# DESTDIR stages the whole tree under another root; the files then name the
# final prefix, as packagers need.
include(GNUInstallDirs)
set(MN_PYTHON_DIR "lib/python3/dist-packages" CACHE STRING
    "where `install` puts the Python package, relative to the prefix (Debian's path under /usr)")

install(TARGETS meganeura ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR})
if(TARGET meganeura_shared)
  install(TARGETS meganeura_shared LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR})
endif()
install(TARGETS meganeura_cli RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
install(FILES ${MN_PUBLIC_HEADERS} DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(FILES ${PROJECT_SOURCE_DIR}/man/meganeura.1 DESTINATION ${CMAKE_INSTALL_MANDIR}/man1)

# ---- meganeura.pc --------------------------------------------------------
# Shared linking needs only -lmeganeura: libmeganeura.so carries its own
# dependencies. Static linking (`pkg-config --static`) also needs what the
# archive uses, in Libs.private: with the Vulkan backend the shaderc, glslang
# and SPIRV-Tools archives CMake found, libstdc++ (shaderc is C++) and
# libvulkan, protobuf-c with the ONNX importer, then cJSON, PCRE2, utf8proc,
# libm and threads. They are not
# Requires.private: pkg-config would then add those packages' Cflags
# (-I/usr/include/cjson, -DUTF8PROC_EXPORTS) to every program's, though
# meganeura.h includes none of their headers.
set(MN_PC_LIBS_PRIVATE "")
if(MN_VULKAN)
  foreach(a ${SHADERC_COMBINED} ${MN_SHADERC_STATIC})
    string(APPEND MN_PC_LIBS_PRIVATE "${a} ")
  endforeach()
  string(APPEND MN_PC_LIBS_PRIVATE "-lstdc++ -lvulkan ")
endif()
if(MN_ONNX)
  string(APPEND MN_PC_LIBS_PRIVATE "-lprotobuf-c ")
endif()
string(APPEND MN_PC_LIBS_PRIVATE "-lcjson -lpcre2-8 -lutf8proc -lm -pthread")
foreach(d LIBDIR INCLUDEDIR)
  if(IS_ABSOLUTE "${CMAKE_INSTALL_${d}}")
    set(MN_PC_${d} "${CMAKE_INSTALL_${d}}")
  else()
    set(MN_PC_${d} "\${prefix}/${CMAKE_INSTALL_${d}}")
  endif()
endforeach()
set(MN_PC_TEMPLATE ${CMAKE_BINARY_DIR}/generated/meganeura.pc.template)
set(MN_PC_FILE ${CMAKE_BINARY_DIR}/generated/install/meganeura.pc)
file(WRITE ${MN_PC_TEMPLATE}.tmp "# written by `cmake --install` (cmake/install.cmake)
prefix=%PREFIX%
exec_prefix=\${prefix}
libdir=${MN_PC_LIBDIR}
includedir=${MN_PC_INCLUDEDIR}

Name: meganeura
Description: neural-network compiler and runtime (graph, autodiff, CPU and Vulkan backends)
Version: ${PROJECT_VERSION}
Libs: -L\${libdir} -lmeganeura
Libs.private: ${MN_PC_LIBS_PRIVATE}
Cflags: -I\${includedir}
")
file(COPY_FILE ${MN_PC_TEMPLATE}.tmp ${MN_PC_TEMPLATE} ONLY_IF_DIFFERENT)
file(REMOVE ${MN_PC_TEMPLATE}.tmp)
install(CODE "
  file(READ \"${MN_PC_TEMPLATE}\" pc)
  string(REPLACE \"%PREFIX%\" \"\${CMAKE_INSTALL_PREFIX}\" pc \"\${pc}\")
  file(WRITE \"${MN_PC_FILE}\" \"\${pc}\")")
install(FILES ${MN_PC_FILE} DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)

# ---- the Python package --------------------------------------------------
# python/meganeura plus _installed.py, which names the installed
# libmeganeura.so.X so that `import meganeura` finds it without
# LD_LIBRARY_PATH (python/meganeura/_lib.py).
if(TARGET meganeura_shared)
  install(DIRECTORY ${PROJECT_SOURCE_DIR}/python/meganeura DESTINATION ${MN_PYTHON_DIR}
          FILES_MATCHING PATTERN "*.py" PATTERN "__pycache__" EXCLUDE)
  if(IS_ABSOLUTE "${CMAKE_INSTALL_LIBDIR}")
    set(MN_PY_LIBDIR "${CMAKE_INSTALL_LIBDIR}")
  else()
    set(MN_PY_LIBDIR "\${CMAKE_INSTALL_PREFIX}/${CMAKE_INSTALL_LIBDIR}")
  endif()
  set(MN_PY_INSTALLED ${CMAKE_BINARY_DIR}/generated/install/_installed.py)
  install(CODE "
    file(WRITE \"${MN_PY_INSTALLED}\" \"# written by `cmake --install` (cmake/install.cmake): the installed library\\nLIBRARY = '${MN_PY_LIBDIR}/libmeganeura.so.${PROJECT_VERSION_MAJOR}'\\n\")")
  install(FILES ${MN_PY_INSTALLED} DESTINATION ${MN_PYTHON_DIR}/meganeura)
endif()
