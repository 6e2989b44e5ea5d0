//go:build linux

package netns

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// A Link describes a delay line between two namespaces.
type Link struct {
	// Delay is how long each packet is held, in each direction: the
	// round trip time is twice that.
	Delay time.Duration
	// Loss is the share of packets dropped, in each direction, at
	// random (0.01 for 1%).
	Loss float64
	// Rate, if set, limits each direction (as tc writes it: 20mbit)
	// with tbf on the device the packets leave by.
	Rate string
}

// LinkStats counts the packets a delay line carried and dropped.
type LinkStats struct {
	Packets, Dropped int64
}

// A DelayLine joins two namespaces through this process.
//
// The kernel here has no netem, so latency is made in user space: each
// namespace gets a TUN device, a point-to-point link to the other's
// address, and this process reads every packet that one namespace sends
// into its TUN device, holds it for Link.Delay (dropping Link.Loss of
// them at random), and writes it into the other namespace's TUN device,
// where the kernel receives it as if from a wire. A packet is written
// out exactly Delay after it was read, so order is kept; tbf on each TUN
// device (Link.Rate) makes the bottleneck, before the packet reaches the
// delay line, as a slow uplink would. The line stops, and both devices
// vanish, when the test ends.
type DelayLine struct {
	link    Link
	a, b    *os.File
	packets atomic.Int64
	dropped atomic.Int64
	cut     atomic.Bool
	wg      sync.WaitGroup
}

// Cut cuts the line (every packet is dropped, both ways) or, with false,
// mends it, as a cable pulled out and put back.
func (d *DelayLine) Cut(cut bool) { d.cut.Store(cut) }

// NewDelayLine joins a and b: a gets address aIP and b bIP (plain IPv4
// addresses, as 10.9.0.1), each reaching the other through the line. The
// device in each namespace is named after the other (see [LineDev]), so
// that one namespace can have lines to several others.
func NewDelayLine(t testing.TB, a *NS, aIP string, b *NS, bIP string, link Link) *DelayLine {
	t.Helper()
	d := &DelayLine{link: link}
	var err error
	if d.a, err = openTUN(a.Name, LineDev(b)); err != nil {
		t.Skipf("cannot make a TUN device in a namespace: %v", err)
	}
	if d.b, err = openTUN(b.Name, LineDev(a)); err != nil {
		d.a.Close()
		t.Skipf("cannot make a TUN device in a namespace: %v", err)
	}
	t.Cleanup(d.close)
	for _, e := range []struct {
		ns, other  *NS
		self, peer string
	}{{a, b, aIP, bIP}, {b, a, bIP, aIP}} {
		dev := LineDev(e.other)
		e.ns.Must(t, "ip", "addr", "add", e.self, "peer", e.peer, "dev", dev)
		e.ns.Must(t, "ip", "link", "set", dev, "up")
		if link.Rate != "" {
			e.ns.Rate(t, dev, link.Rate)
		}
	}
	d.wg.Add(2)
	go d.carry(d.a, d.b)
	go d.carry(d.b, d.a)
	return d
}

// LineDev returns the name of the device through which a namespace
// reaches other over a delay line: "t" and other's name, within the 15
// bytes of a device name.
func LineDev(other *NS) string {
	name := "t" + other.Name
	return name[:min(len(name), 15)]
}

// Stats returns the packets carried and dropped so far, both directions.
func (d *DelayLine) Stats() LinkStats {
	return LinkStats{Packets: d.packets.Load(), Dropped: d.dropped.Load()}
}

func (d *DelayLine) close() {
	d.a.Close() // Ends the reads, and so both goroutines.
	d.b.Close()
	d.wg.Wait()
}

// A packet waits in the line until due.
type packet struct {
	due  time.Time
	data []byte
}

// carry moves packets from one TUN device to the other: a reader that
// stamps each with the time it is due, and a writer that waits for it.
func (d *DelayLine) carry(from, to *os.File) {
	defer d.wg.Done()
	line := make(chan packet, 1<<16)
	var wg sync.WaitGroup
	wg.Go(func() {
		timer := time.NewTimer(time.Hour)
		defer timer.Stop()
		for p := range line {
			if wait := time.Until(p.due); wait > 0 {
				timer.Reset(wait)
				<-timer.C
			}
			to.Write(p.data) // Fails only once the line is closed.
		}
	})
	defer func() {
		close(line)
		wg.Wait()
	}()
	buf := make([]byte, 65536)
	for {
		n, err := from.Read(buf)
		if err != nil {
			return
		}
		d.packets.Add(1)
		if d.cut.Load() || d.link.Loss > 0 && rand.Float64() < d.link.Loss {
			d.dropped.Add(1)
			continue
		}
		select {
		case line <- packet{due: time.Now().Add(d.link.Delay), data: append([]byte(nil), buf[:n]...)}:
		default:
			d.dropped.Add(1) // The line is full: tail drop, as a router's queue.
		}
	}
}

// openTUN creates the TUN device name in the namespace ns and returns
// it open: the device lasts as long as the file. The creating thread
// enters the namespace for the ioctl only.
func openTUN(ns, name string) (*os.File, error) {
	type result struct {
		f   *os.File
		err error
	}
	ch := make(chan result, 1)
	go func() {
		// The thread that changed namespace is not unlocked if it cannot
		// change back, and so ends with this goroutine.
		runtime.LockOSThread()
		f, back, err := openTUNIn(ns, name)
		ch <- result{f, err}
		if back {
			runtime.UnlockOSThread()
		}
	}()
	r := <-ch
	return r.f, r.err
}

func openTUNIn(ns, name string) (_ *os.File, back bool, err error) {
	self, err := os.Open("/proc/thread-self/ns/net")
	if err != nil {
		return nil, true, err
	}
	defer self.Close()
	target, err := os.Open("/var/run/netns/" + ns)
	if err != nil {
		return nil, true, err
	}
	defer target.Close()
	if err := unix.Setns(int(target.Fd()), unix.CLONE_NEWNET); err != nil {
		return nil, true, fmt.Errorf("setns %s: %w", ns, err)
	}
	back = true
	defer func() {
		if e := unix.Setns(int(self.Fd()), unix.CLONE_NEWNET); e != nil {
			back = false
			err = errors.Join(err, fmt.Errorf("setns back: %w", e))
		}
	}()
	fd, err := unix.Open("/dev/net/tun", unix.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, back, fmt.Errorf("open /dev/net/tun: %w", err)
	}
	var req [unix.IFNAMSIZ + 64]byte
	copy(req[:unix.IFNAMSIZ-1], name)
	*(*uint16)(unsafe.Pointer(&req[unix.IFNAMSIZ])) = unix.IFF_TUN | unix.IFF_NO_PI
	if _, _, e := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), unix.TUNSETIFF, uintptr(unsafe.Pointer(&req[0]))); e != 0 {
		unix.Close(fd)
		return nil, back, fmt.Errorf("TUNSETIFF %s: %w", name, e)
	}
	if err := unix.SetNonblock(fd, true); err != nil {
		unix.Close(fd)
		return nil, back, err
	}
	// Non-blocking, so that the runtime's poller serves reads and Close
	// ends them.
	return os.NewFile(uintptr(fd), "/dev/net/tun:"+ns+"/"+name), back, nil
}
