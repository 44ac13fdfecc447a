//go:build linux && !nocuda

package cuda

import "github.com/ebitengine/purego"

func dlopen(path string) (uintptr, error) {
	return purego.Dlopen(path, purego.RTLD_NOW|purego.RTLD_LOCAL)
}

func dlsym(h uintptr, name string) (uintptr, error) { return purego.Dlsym(h, name) }

// dlclose unloads a library Load rejected; nothing was bound from it, so an
// error leaves only a mapping behind.
func dlclose(h uintptr) { _ = purego.Dlclose(h) }

// register binds the Go function *fptr to the C function at addr.
func register(fptr any, addr uintptr) { purego.RegisterFunc(fptr, addr) }
