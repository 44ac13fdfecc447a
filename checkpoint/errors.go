package checkpoint

import "errors"

// Sentinel errors, wrapped with details. Test them with errors.Is.
var (
	// ErrManifest means a manifest is malformed.
	ErrManifest = errors.New("checkpoint: invalid manifest")
	// ErrCommitted means the prefix holds a committed checkpoint already
	// (its manifest): a save there changes nothing in the bucket.
	ErrCommitted = errors.New("checkpoint: the prefix holds a committed checkpoint")
	// ErrBusy means another save owns the prefix: one in progress (on
	// this agent or another), or one that failed and left its claim.
	ErrBusy = errors.New("checkpoint: another save owns the prefix")
	// ErrUnsafeFile means the directory to save holds something that is
	// not a regular file (a symlink, a device, a socket…).
	ErrUnsafeFile = errors.New("checkpoint: not a regular file")
	// ErrChanged means a file changed while it was being saved.
	ErrChanged = errors.New("checkpoint: a file changed while it was being saved")
	// ErrPermission means the caller may not save or restore there: the
	// directory or a file belongs to another user.
	ErrPermission = errors.New("checkpoint: permission denied")
	// ErrFailed means the save failed and will not be uploaded (the
	// reason follows).
	ErrFailed = errors.New("checkpoint: save failed")
	// ErrNoCheckpoint means no save or committed checkpoint is known at
	// the prefix.
	ErrNoCheckpoint = errors.New("checkpoint: no checkpoint at the prefix")
	// ErrMismatch means a committed checkpoint's objects do not match its
	// manifest (one was deleted or replaced since).
	ErrMismatch = errors.New("checkpoint: the objects do not match the manifest")
	// ErrClosed means the Store has been closed.
	ErrClosed = errors.New("checkpoint: store closed")
)
