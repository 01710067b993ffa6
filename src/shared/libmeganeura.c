/* libmeganeura.c - the one source of libmeganeura.so (CMakeLists.txt,
 * target meganeura_shared).
 *
 * The shared library is the whole static library linked with
 * --whole-archive, behind the version script cmake/exports.cmake writes from
 * the public headers: its symbols are exactly the mn_* functions of
 * include/meganeura.h and include/meganeura_models.h, versioned MEGANEURA_0,
 * with the soname libmeganeura.so.<major>. This file holds nothing; CMake
 * needs a source to make a library.
 *
 * Does not: define any function (they all come from the archive).
 */
#include "meganeura.h"

typedef int mn_shared_library_has_no_code_of_its_own;
