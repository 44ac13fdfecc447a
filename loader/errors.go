package loader

import "errors"

// Sentinel errors, wrapped with details. Test them with errors.Is.
var (
	// ErrDataset means the dataset is malformed: arrays of one shard with
	// different leading dimensions, a shard missing an array, arrays whose
	// element type or row shape differ between shards, a file that is not
	// a usable .npy array, or a file that disagrees with the manifest.
	ErrDataset = errors.New("loader: invalid dataset")
	// ErrManifest means a manifest is not valid JSON of the documented
	// shape.
	ErrManifest = errors.New("loader: invalid manifest")
	// ErrPattern means a file pattern is malformed or matches nothing.
	ErrPattern = errors.New("loader: invalid pattern")
	// ErrConfig means a Config is invalid.
	ErrConfig = errors.New("loader: invalid configuration")
	// ErrResume means Config.Resume does not belong to this configuration
	// (its fingerprint differs) or is out of range.
	ErrResume = errors.New("loader: cannot resume from this state")
	// ErrClosed means the Loader has been closed.
	ErrClosed = errors.New("loader: closed")
	// ErrHeld means Next was called while the caller holds every batch
	// buffer (Config.Prefetch batches not released): no batch could ever
	// come.
	ErrHeld = errors.New("loader: every batch buffer is held by the caller")
	// ErrFieldBytes means a WebDataset batch's field does not fit its
	// buffer of Config.FieldBytes.
	ErrFieldBytes = errors.New("loader: a batch's field exceeds its buffer")
	// ErrNoRecords means a format must read whole shards to build the
	// dataset (a WebDataset tar's index, not saved in Env.Index) and
	// Env.Records is nil.
	ErrNoRecords = errors.New("loader: the dataset's shards must be read to index them, and no Source lends them")
)
