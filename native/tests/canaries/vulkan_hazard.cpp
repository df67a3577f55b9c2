// Vulkan validation canary: a deliberately unsynchronized sequence that the Khronos validation
// layer's synchronization validation must report (docs/gpu-checks.md).
// One command buffer fills a buffer (a transfer write) and copies from it (a transfer read) with
// no barrier between: SYNC-HAZARD-READ-AFTER-WRITE. Then a second submit writes the buffer again
// while nothing orders it after the first submit's read, caught only by submit-time validation
// (SYNC-HAZARD-WRITE-AFTER-READ across submits).
// Exits 0 once both submits are done; the run that loads the layer fails unless both hazards are
// reported (the CTest test GpuCanary.vulkan_hazard_is_reported, sam3d/core/gpu_checks.py).
// Exit 77 (skipped): no Vulkan device, or VK_INSTANCE_LAYERS does not ask for the layer (a run
// without validation, where there is nothing to prove).
#include <vulkan/vulkan.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

namespace {

void check(VkResult r, const char* what) {
    if (r != VK_SUCCESS) {
        std::fprintf(stderr, "vulkan_hazard: %s failed (VkResult %d)\n", what, static_cast<int>(r));
        std::exit(2);
    }
}

// A Vulkan info struct, zeroed, with its sType.
template <class T>
T make(VkStructureType type) {
    T t{};
    t.sType = type;
    return t;
}

uint32_t memory_type(VkPhysicalDevice gpu, uint32_t bits, VkMemoryPropertyFlags want) {
    VkPhysicalDeviceMemoryProperties mp;
    vkGetPhysicalDeviceMemoryProperties(gpu, &mp);
    for (uint32_t i = 0; i < mp.memoryTypeCount; ++i) {
        if ((bits & (1u << i)) && (mp.memoryTypes[i].propertyFlags & want) == want) {
            return i;
        }
    }
    std::fprintf(stderr, "vulkan_hazard: no memory type with flags 0x%x\n", want);
    std::exit(2);
}

}  // namespace

int main() {
    const char* layers = std::getenv("VK_INSTANCE_LAYERS");
    if (layers == nullptr || std::strstr(layers, "VK_LAYER_KHRONOS_validation") == nullptr) {
        std::printf("vulkan_hazard: VK_INSTANCE_LAYERS does not ask for VK_LAYER_KHRONOS_validation: skipped\n");
        return 77;
    }
    auto app = make<VkApplicationInfo>(VK_STRUCTURE_TYPE_APPLICATION_INFO);
    app.pApplicationName = "sam3d vulkan_hazard canary";
    app.apiVersion = VK_API_VERSION_1_2;
    auto ici = make<VkInstanceCreateInfo>(VK_STRUCTURE_TYPE_INSTANCE_CREATE_INFO);
    ici.pApplicationInfo = &app;
    VkInstance instance;
    check(vkCreateInstance(&ici, nullptr, &instance), "vkCreateInstance");

    uint32_t n = 0;
    vkEnumeratePhysicalDevices(instance, &n, nullptr);
    if (n == 0) {
        std::printf("vulkan_hazard: no Vulkan device\n");
        return 77;
    }
    std::vector<VkPhysicalDevice> gpus(n);
    vkEnumeratePhysicalDevices(instance, &n, gpus.data());
    VkPhysicalDevice gpu = gpus[0];

    uint32_t nq = 0;
    vkGetPhysicalDeviceQueueFamilyProperties(gpu, &nq, nullptr);
    std::vector<VkQueueFamilyProperties> families(nq);
    vkGetPhysicalDeviceQueueFamilyProperties(gpu, &nq, families.data());
    uint32_t family = 0;
    while (family < nq && !(families[family].queueFlags & (VK_QUEUE_GRAPHICS_BIT | VK_QUEUE_COMPUTE_BIT | VK_QUEUE_TRANSFER_BIT))) {
        ++family;
    }
    const float priority = 1.0f;
    auto qci = make<VkDeviceQueueCreateInfo>(VK_STRUCTURE_TYPE_DEVICE_QUEUE_CREATE_INFO);
    qci.queueFamilyIndex = family;
    qci.queueCount = 1;
    qci.pQueuePriorities = &priority;
    auto dci = make<VkDeviceCreateInfo>(VK_STRUCTURE_TYPE_DEVICE_CREATE_INFO);
    dci.queueCreateInfoCount = 1;
    dci.pQueueCreateInfos = &qci;
    VkDevice device;
    check(vkCreateDevice(gpu, &dci, nullptr, &device), "vkCreateDevice");
    VkQueue queue;
    vkGetDeviceQueue(device, family, 0, &queue);

    const VkDeviceSize size = 1 << 16;
    VkBuffer buf[2];
    VkDeviceMemory mem[2];
    for (int i = 0; i < 2; ++i) {
        auto bci = make<VkBufferCreateInfo>(VK_STRUCTURE_TYPE_BUFFER_CREATE_INFO);
        bci.size = size;
        bci.usage = VK_BUFFER_USAGE_TRANSFER_SRC_BIT | VK_BUFFER_USAGE_TRANSFER_DST_BIT;
        check(vkCreateBuffer(device, &bci, nullptr, &buf[i]), "vkCreateBuffer");
        VkMemoryRequirements req;
        vkGetBufferMemoryRequirements(device, buf[i], &req);
        auto mai = make<VkMemoryAllocateInfo>(VK_STRUCTURE_TYPE_MEMORY_ALLOCATE_INFO);
        mai.allocationSize = req.size;
        mai.memoryTypeIndex = memory_type(gpu, req.memoryTypeBits, 0);
        check(vkAllocateMemory(device, &mai, nullptr, &mem[i]), "vkAllocateMemory");
        check(vkBindBufferMemory(device, buf[i], mem[i], 0), "vkBindBufferMemory");
    }

    auto pci = make<VkCommandPoolCreateInfo>(VK_STRUCTURE_TYPE_COMMAND_POOL_CREATE_INFO);
    pci.queueFamilyIndex = family;
    VkCommandPool pool;
    check(vkCreateCommandPool(device, &pci, nullptr, &pool), "vkCreateCommandPool");
    VkCommandBuffer cmd[2];
    auto cai = make<VkCommandBufferAllocateInfo>(VK_STRUCTURE_TYPE_COMMAND_BUFFER_ALLOCATE_INFO);
    cai.commandPool = pool;
    cai.level = VK_COMMAND_BUFFER_LEVEL_PRIMARY;
    cai.commandBufferCount = 2;
    check(vkAllocateCommandBuffers(device, &cai, cmd), "vkAllocateCommandBuffers");

    auto begin = make<VkCommandBufferBeginInfo>(VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO);
    const VkBufferCopy whole{0, 0, size};
    // First: write buf[0], then read it with no barrier (read after write, within one command buffer).
    check(vkBeginCommandBuffer(cmd[0], &begin), "vkBeginCommandBuffer");
    vkCmdFillBuffer(cmd[0], buf[0], 0, size, 0x5a5a5a5au);
    vkCmdCopyBuffer(cmd[0], buf[0], buf[1], 1, &whole);
    check(vkEndCommandBuffer(cmd[0]), "vkEndCommandBuffer");
    // Second: write buf[0] again, ordered after nothing (write after read, across submits).
    check(vkBeginCommandBuffer(cmd[1], &begin), "vkBeginCommandBuffer");
    vkCmdFillBuffer(cmd[1], buf[0], 0, size, 0u);
    check(vkEndCommandBuffer(cmd[1]), "vkEndCommandBuffer");

    for (int i = 0; i < 2; ++i) {
        auto si = make<VkSubmitInfo>(VK_STRUCTURE_TYPE_SUBMIT_INFO);
        si.commandBufferCount = 1;
        si.pCommandBuffers = &cmd[i];
        check(vkQueueSubmit(queue, 1, &si, VK_NULL_HANDLE), "vkQueueSubmit");
    }
    check(vkQueueWaitIdle(queue), "vkQueueWaitIdle");

    vkDestroyCommandPool(device, pool, nullptr);
    for (int i = 0; i < 2; ++i) {
        vkDestroyBuffer(device, buf[i], nullptr);
        vkFreeMemory(device, mem[i], nullptr);
    }
    vkDestroyDevice(device, nullptr);
    vkDestroyInstance(instance, nullptr);
    std::printf("vulkan_hazard: both submits done\n");
    return 0;
}
