package cuda

import (
	"errors"
	"strconv"
)

// Result is a CUresult, the status every driver call returns. The non-zero
// constants below are sentinel errors: errors.Is(err, cuda.ErrOutOfMemory)
// holds for any *Error carrying that code.
type Result int32

// CUresult codes the agent meets (cuda.h, CUDA 12.6).
const (
	Success                        Result = 0
	ErrInvalidValue                Result = 1
	ErrOutOfMemory                 Result = 2
	ErrNotInitialized              Result = 3
	ErrDeinitialized               Result = 4
	ErrStubLibrary                 Result = 34
	ErrDeviceUnavailable           Result = 46
	ErrNoDevice                    Result = 100
	ErrInvalidDevice               Result = 101
	ErrInvalidContext              Result = 201
	ErrMapFailed                   Result = 205
	ErrInvalidHandle               Result = 400
	ErrNotReady                    Result = 600
	ErrIllegalAddress              Result = 700
	ErrHostMemoryAlreadyRegistered Result = 712
	ErrHostMemoryNotRegistered     Result = 713
	ErrNotPermitted                Result = 800
	ErrNotSupported                Result = 801
	ErrSystemNotReady              Result = 802
	ErrSystemDriverMismatch        Result = 803
	ErrCompatNotSupportedOnDevice  Result = 804
	ErrUnknown                     Result = 999
)

var resultNames = map[Result]string{
	Success:                        "CUDA_SUCCESS",
	ErrInvalidValue:                "CUDA_ERROR_INVALID_VALUE",
	ErrOutOfMemory:                 "CUDA_ERROR_OUT_OF_MEMORY",
	ErrNotInitialized:              "CUDA_ERROR_NOT_INITIALIZED",
	ErrDeinitialized:               "CUDA_ERROR_DEINITIALIZED",
	ErrStubLibrary:                 "CUDA_ERROR_STUB_LIBRARY",
	ErrDeviceUnavailable:           "CUDA_ERROR_DEVICE_UNAVAILABLE",
	ErrNoDevice:                    "CUDA_ERROR_NO_DEVICE",
	ErrInvalidDevice:               "CUDA_ERROR_INVALID_DEVICE",
	ErrInvalidContext:              "CUDA_ERROR_INVALID_CONTEXT",
	ErrMapFailed:                   "CUDA_ERROR_MAP_FAILED",
	ErrInvalidHandle:               "CUDA_ERROR_INVALID_HANDLE",
	ErrNotReady:                    "CUDA_ERROR_NOT_READY",
	ErrIllegalAddress:              "CUDA_ERROR_ILLEGAL_ADDRESS",
	ErrHostMemoryAlreadyRegistered: "CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED",
	ErrHostMemoryNotRegistered:     "CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED",
	ErrNotPermitted:                "CUDA_ERROR_NOT_PERMITTED",
	ErrNotSupported:                "CUDA_ERROR_NOT_SUPPORTED",
	ErrSystemNotReady:              "CUDA_ERROR_SYSTEM_NOT_READY",
	ErrSystemDriverMismatch:        "CUDA_ERROR_SYSTEM_DRIVER_MISMATCH",
	ErrCompatNotSupportedOnDevice:  "CUDA_ERROR_COMPAT_NOT_SUPPORTED_ON_DEVICE",
	ErrUnknown:                     "CUDA_ERROR_UNKNOWN",
}

// Name returns the cuda.h name of r, or "unknown CUresult" for codes this
// package does not list (Error asks the driver for those).
func (r Result) Name() string {
	if n, ok := resultNames[r]; ok {
		return n
	}
	return "unknown CUresult"
}

// Error returns "CUDA_ERROR_OUT_OF_MEMORY (2)".
func (r Result) Error() string { return r.Name() + " (" + strconv.Itoa(int(r)) + ")" }

// Error is a failed driver call: the function, its CUresult and the
// result's name as the driver spells it (cuGetErrorName). It unwraps to the
// Result, so errors.Is(err, cuda.ErrOutOfMemory) works.
type Error struct {
	// Op is the driver function, e.g. "cuMemAlloc_v2".
	Op string
	// Code is what it returned.
	Code Result
	// Name is the code's name, e.g. "CUDA_ERROR_OUT_OF_MEMORY".
	Name string
}

// Error returns "cuMemAlloc_v2: CUDA_ERROR_OUT_OF_MEMORY (2)".
func (e *Error) Error() string {
	return e.Op + ": " + e.Name + " (" + strconv.Itoa(int(e.Code)) + ")"
}

// Unwrap returns the Result.
func (e *Error) Unwrap() error { return e.Code }

// Errors of the binding itself, before or beside the driver.
var (
	// ErrNoDriver reports that libcuda could not be loaded: no NVIDIA
	// driver is installed, or the library path is wrong.
	ErrNoDriver = errors.New("cuda: NVIDIA driver library not found")
	// ErrMissingSymbol reports a libcuda without a function this package
	// binds (a driver older than CUDA 11, or not libcuda at all).
	ErrMissingSymbol = errors.New("cuda: driver library lacks required functions")
	// ErrReleased reports use of a Context after Release.
	ErrReleased = errors.New("cuda: context released")
)
