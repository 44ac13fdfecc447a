//go:build !unix

package gpubench

import "errors"

type shmMap struct{ b []byte }

func mapShm(string, int, func([]byte)) (*shmMap, error) {
	return nil, errors.New("gpu: bench: shared-memory mappings need a Unix system")
}

func (m *shmMap) unmap() error { return nil }
