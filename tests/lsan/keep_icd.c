/* keep_icd.c - sanitizer builds only: keeps Mesa's lavapipe Vulkan driver
 * loaded for the whole life of the process, so that LeakSanitizer sees the
 * memory the driver still holds at exit as reachable.
 *
 * The Vulkan loader dlclose()s the driver at vkDestroyInstance. lavapipe keeps
 * a 128-byte block per instance reachable only from its own globals; once the
 * driver is unmapped LeakSanitizer reports it as "Direct leak of 128 byte(s)
 * ... realloc ... (<unknown module>)", a one-frame stack that no suppression
 * can match. Opening the driver once more with RTLD_NODELETE (the loader's
 * later dlopen of the same file gets the same, now undeletable, object) makes
 * the loader's dlclose leave it mapped, and nothing is reported.
 *
 * tests/CMakeLists.txt compiles this file into every executable of a
 * MN_SANITIZE build with the Vulkan backend (tests, examples, the CLI).
 * Does not: hide leaks of the project's code (tests/lsan/leak_canary.c checks
 * that they are still reported), keep any other driver loaded, or do anything
 * where lavapipe is not installed.
 */
#include <dlfcn.h>

__attribute__((constructor)) static void mn_keep_lavapipe_loaded(void) {
    /* the handle is never closed: the driver stays for the process's life */
    (void)dlopen("libvulkan_lvp.so", RTLD_LAZY | RTLD_LOCAL | RTLD_NODELETE);
    /* lavapipe's JIT: on a fresh Debian 12 root it was still unloaded once
     * (test_session_errors reported its cached state as "<unknown module>"
     * leaks); kept loaded, its leaks carry its name and
     * tests/lsan/vulkan-drivers.supp scopes them */
    (void)dlopen("libLLVM-15.so.1", RTLD_LAZY | RTLD_LOCAL | RTLD_NODELETE);
    /* the Khronos validation layer: the loader unloads it at
     * vkDestroyInstance too, and its per-device state of the synchronisation
     * validation then shows as "<unknown module>" leaks (fresh Debian 12
     * root, test_session_errors); kept loaded, the suppression file names it */
    (void)dlopen("libVkLayer_khronos_validation.so", RTLD_LAZY | RTLD_LOCAL | RTLD_NODELETE);
}
