/* cmd_devices.c - `meganeura devices`: lists the Vulkan devices, their
 * limits and the extensions the project uses (mn_list_devices).
 *
 * Does not: pick a device (MEGANEURA_DEVICE does, for sessions).
 */
#include <stdio.h>

#include "cli/args.h"
#include "cli/cmd_devices.h"
#include "cli/messages.h"
#include "meganeura.h"

int cmd_devices(int argc, char **argv) {
    for (int i = 1; i < argc; i++) {
        if (is_help(argv[i])) {
            printf("Usage: meganeura devices\n\nLists the Vulkan devices (index, name, type), their limits and\n"
                   "the extensions the project uses. MEGANEURA_DEVICE=INDEX|NAME picks one for sessions;\n"
                   "by default a discrete GPU, then an integrated one, then a CPU device (lavapipe).\n");
            return 0;
        }
        return usage_error("devices", "devices: unknown option '%s'", show(argv[i]).s);
    }
    mn_status st = mn_list_devices(stdout);
    if (st == MN_E_UNSUPPORTED) return fail("this build has no Vulkan backend (configure with -DMN_VULKAN=ON)");
    return st ? fail("could not list Vulkan devices") : 0;
}

