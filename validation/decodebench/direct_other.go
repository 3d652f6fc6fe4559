//go:build !linux

package decodebench

const oDirect = 0
