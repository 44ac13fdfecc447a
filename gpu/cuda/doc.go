// Package cuda binds the parts of the NVIDIA CUDA driver API (libcuda) that
// move data from host to GPU: device discovery, primary contexts, pinned
// and registered host memory, device memory, streams, asynchronous
// host-to-device copies and events.
//
// # Why purego
//
// The driver is loaded at run time with github.com/ebitengine/purego:
// dlopen libcuda.so.1, dlsym each function by its explicit versioned name
// (cuMemAlloc_v2, not the cuda.h macro), call it through a Go function
// value. This needs no CUDA toolkit, no cuda.h and no C compiler at build
// time, builds with CGO_ENABLED=0, and lets tests load a small fake
// libcuda written in C (gpu/testdata/fake_libcuda.c) that checks every
// argument we pass. The alternative, cgo with our own dlopen and a C
// trampoline per function, also works, but puts C in the build, ties the
// package to cgo and offers no more checking. cuda.h-based bindings need the
// toolkit and fail to build in CI.
//
// purego links the binary dynamically against glibc (its cgo-free runtime
// imports dlopen), so a CGO_ENABLED=0 build is not a static binary. The
// nocuda build tag leaves the binding out (Load fails with ErrNoDriver,
// saying so): the container image builds the daemon static with it, since
// the daemon itself never touches a GPU.
//
// A missing function is an error from Load (ErrMissingSymbol, naming it),
// never a panic: symbols are resolved with purego.Dlsym before any is
// registered, instead of purego.RegisterLibFunc, which panics.
//
// # Threading
//
// A CUDA context is current per OS thread, while goroutines move between
// threads. Every Context method therefore locks its goroutine to its OS
// thread (runtime.LockOSThread), makes the context current there
// (cuCtxSetCurrent, a thread-local store) and makes the driver call before
// unlocking. The cost is one cheap extra call; in exchange a Context is
// usable from any goroutine, concurrently (the driver is thread-safe), and
// no request has to queue behind another device owner's blocking call.
// Blocking calls (StreamSynchronize, EventSynchronize, pageable copies,
// MemFreeHost) block only the calling goroutine's thread. Callers that need
// the thread itself configured, such as NUMA-local allocation, lock their
// goroutine first: the nested lock keeps the call on their thread.
//
// # Errors
//
// Every failed call returns an *Error naming the function and the result as
// the driver names it, "cuMemAlloc_v2: CUDA_ERROR_OUT_OF_MEMORY (2)". It
// unwraps to a Result, and the Result constants are sentinel errors:
// errors.Is(err, cuda.ErrOutOfMemory). Arguments rejected before reaching
// the driver wrap ErrInvalidValue, as the driver would.
//
// # Lifetimes
//
// The library is never unloaded. Everything made in a context (memory,
// registrations, streams, events) dies with it when the last retainer
// releases it; callers free what they made first, host memory before
// unmapping it, and never rely on finalizers. No fork after cuInit
// (os/exec's vfork+exec is fine).
package cuda
