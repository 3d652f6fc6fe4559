package decodebench

import "syscall"

const oDirect = syscall.O_DIRECT
