package jnf

import "errors"

// ErrVerification is matched (with errors.Is) by every error that says
// bytes or metadata are not what was recorded for them: a digest mismatch,
// a record table or manifest that breaks the format's rules or differs from
// the files, a bad signature, a replay that diverged. Callers map it to
// "verification failed" (the command line exits with status 3); any other
// error is a usage or I/O error (status 1).
var ErrVerification = errors.New("verification failed")
