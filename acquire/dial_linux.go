package acquire

import (
	"syscall"
)

// tcpUserTimeout is TCP_USER_TIMEOUT from linux/tcp.h; the syscall package
// predates it.
const tcpUserTimeout = 0x12

func setUserTimeout(network, _ string, c syscall.RawConn) error {
	if network != "tcp" && network != "tcp4" && network != "tcp6" {
		return nil
	}
	var sockErr error
	err := c.Control(func(fd uintptr) {
		sockErr = syscall.SetsockoptInt(int(fd), syscall.IPPROTO_TCP, tcpUserTimeout, int(userTimeout.Milliseconds()))
	})
	if err != nil {
		return err
	}
	return sockErr
}
