//go:build !unix

package supervisor

// Process is a command running under its supervisor; there are none here.
type Process struct{}

// Start returns ErrUnsupported.
func Start(Spec) (*Process, error) { return nil, ErrUnsupported }

// LookPath returns ErrUnsupported.
func LookPath(file, dir, pathList string) (string, error) { return "", ErrUnsupported }

// Terminate does nothing.
func (p *Process) Terminate() {}

// Kill does nothing.
func (p *Process) Kill() {}

// Wait returns ErrUnsupported.
func (p *Process) Wait() (Status, error) { return Status{}, ErrUnsupported }
