// Kernels for the real-GPU suite.  kernels.ptx beside this file is generated
// from it with:  nvcc -ptx -arch=compute_80 -o kernels.ptx kernels.cu
// (compute_80 PTX is JIT-compiled by the driver for any newer GPU.)

// Spins for `spin` clock cycles, then writes p[i] = seed + 7 * i.  The spin
// makes "read before the producer's kernel finished" observable.
extern "C" __global__ void slow_fill(unsigned char *p, unsigned long long n,
                                     unsigned int seed, unsigned long long spin)
{
        unsigned long long t0 = clock64();
        while (clock64() - t0 < spin)
                ;
        unsigned long long stride = (unsigned long long)gridDim.x * blockDim.x;
        for (unsigned long long i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride)
                p[i] = (unsigned char)(seed + 7u * (unsigned int)i);
}

// Counts bytes that differ from the slow_fill pattern for a buffer that
// starts `base` bytes into the pattern.
extern "C" __global__ void count_bad(const unsigned char *p, unsigned long long n,
                                    unsigned int seed, unsigned long long base,
                                    unsigned long long *bad)
{
        unsigned long long stride = (unsigned long long)gridDim.x * blockDim.x;
        unsigned long long local = 0;
        for (unsigned long long i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride)
                if (p[i] != (unsigned char)(seed + 7u * (unsigned int)(base + i)))
                        local++;
        if (local)
                atomicAdd(bad, local);
}
