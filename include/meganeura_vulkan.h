/* meganeura_vulkan.h - running sessions on a host application's own Vulkan
 * device and queue, with inputs and outputs in the application's buffers.
 *
 * For engines, games and XR applications that already own a VkDevice: the
 * library creates nothing it would share with the host except its own
 * buffers, pipelines, descriptor pools, command pool, fence and query pool,
 * and destroys only those. The ownership and synchronisation contract is in
 * docs/EMBEDDING.md; examples/host_app.c is a complete host in miniature.
 *
 * Needs <vulkan/vulkan.h> (the host's); everything else is meganeura.h.
 */
#ifndef MEGANEURA_VULKAN_H
#define MEGANEURA_VULKAN_H

#include <vulkan/vulkan.h>

#include "meganeura.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Exported from the shared library (built with hidden visibility and a
 * version script generated from the public headers: cmake/exports.cmake). */
#if defined(__GNUC__)
#pragma GCC visibility push(default)
#endif

/* What the host created. The library checks what it needs and names what is
 * missing in the error: a Vulkan 1.1 device (1.2 for timeline semaphores in
 * mn_vulkan_submit), a queue family with VK_QUEUE_COMPUTE_BIT, and, only for
 * models whose tensors are larger than one binding, the descriptor-array
 * indexing feature named then. Features are read from enabled_features: the
 * VkPhysicalDeviceFeatures2 chain the host passed to vkCreateDevice
 * (VkPhysicalDeviceVulkan11/12Features, VkPhysicalDeviceDescriptorIndexingFeatures
 * and VkPhysicalDeviceTimelineSemaphoreFeatures are understood); NULL means
 * no optional feature is enabled. The library never destroys any handle of
 * this struct. */
typedef struct mn_vulkan_device_desc {
    VkInstance instance;
    VkPhysicalDevice physical_device;
    VkDevice device;
    uint32_t queue_family; /* the family of queue */
    VkQueue queue;         /* the library submits only here, from the calling thread */
    const VkPhysicalDeviceFeatures2 *enabled_features;
    const VkAllocationCallbacks *allocator; /* used for every object the library creates; may be NULL */
    /* the host's pipeline cache, used instead of the library's own on-disk
     * one (never saved or destroyed by the library); may be VK_NULL_HANDLE */
    VkPipelineCache pipeline_cache;
} mn_vulkan_device_desc;

/* A device over the host's handles, shared by sessions like mn_device_open's
 * (opt.device). On failure *out, if not NULL, is a dead device whose error
 * (mn_device_error) says what is missing. Close with mn_device_close: that
 * drops the library's objects, never the host's device. */
mn_status mn_device_from_vulkan(mn_device **out, const mn_vulkan_device_desc *desc);

/* A range of a host VkBuffer that holds one input or output of a session
 * (f32 or i32 elements, row-major, exactly the tensor's shape). The buffer
 * needs VK_BUFFER_USAGE_STORAGE_BUFFER_BIT, must belong to the session's
 * device and be usable by its queue family (exclusive to it, or concurrent),
 * offset a multiple of minStorageBufferOffsetAlignment, size at least the
 * tensor's bytes. */
typedef struct mn_vulkan_buffer {
    VkBuffer buffer;
    VkDeviceSize offset;
    VkDeviceSize size;
} mn_vulkan_buffer;

/* Binds input or output `name` to the host's buffer: the session's kernels
 * read the input from it and write the output into it, and no copy goes
 * through the CPU. Afterwards mn_session_set_input and mn_session_output on
 * that name are errors (the host owns the bytes). A NULL buffer handle
 * unbinds (the session's own storage again). The session re-records its
 * command buffers at the next run. Vulkan sessions only; the tensor must
 * have storage of its own (not a view of another tensor). */
mn_status mn_session_bind_vulkan_buffer(mn_session *s, const char *name, const mn_vulkan_buffer *buf);

/* How mn_session_run_vulkan orders itself against the host's work on the
 * same queue. Semaphores are the host's; a value array (timeline
 * semaphores, Vulkan 1.2 with timelineSemaphore enabled) may be NULL for
 * binary semaphores. wait_stages NULL: VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT
 * for every wait (the model's first reads). */
typedef struct mn_vulkan_submit {
    uint32_t wait_count;
    const VkSemaphore *wait_semaphores;
    const uint64_t *wait_values;
    const VkPipelineStageFlags *wait_stages;
    uint32_t signal_count;
    const VkSemaphore *signal_semaphores;
    const uint64_t *signal_values;
    /* true: return right after vkQueueSubmit; the host learns of completion
     * through its signal semaphores. The session waits for this submission
     * (its own fence) before its next use of the queue or of its memory. */
    bool no_wait;
} mn_vulkan_submit;

/* mn_session_run (a forward run) as one submission on the session's queue
 * that waits for the host's wait semaphores and signals its signal
 * semaphores. Pending mn_session_set_input uploads ride in the same
 * submission. sub may be NULL (plain run). */
mn_status mn_session_run_vulkan(mn_session *s, const mn_vulkan_submit *sub);

#if defined(__GNUC__)
#pragma GCC visibility pop
#endif

#ifdef __cplusplus
}
#endif

#endif
