package main

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"
)

// The schedule of TestChaos: a list of episodes, each a few faults on the
// five nodes and their heals, made from a seed alone, so that the same
// seed replays the same faults in the same order at the same offsets.
// Every episode ends with every node running, unstopped and connected, so
// that no fault outlives its episode: whatever a fault takes away (the key
// cluster's majority, every dir host of a user) comes back before the
// next episode begins.

// chaosNodes names the five nodes: A, B and C are the key cluster's
// members, D and E use it (-keyserver).
const chaosNodes = "ABCDE"

// A chaosAction is one step of an episode.
type chaosAction struct {
	At   time.Duration // From the start of the run, as planned.
	Do   string        // term, kill, stop, cont, cut, heal, start.
	Node int           // Index into chaosNodes.
}

// isFault reports whether a injects a fault (rather than healing one).
func (a chaosAction) isFault() bool {
	switch a.Do {
	case "term", "kill", "stop", "cut":
		return true
	}
	return false
}

func (a chaosAction) String() string {
	return fmt.Sprintf("+%5.1fs %-5s %c", a.At.Seconds(), a.Do, chaosNodes[a.Node])
}

// A chaosEpisode is a few faults and their heals, in time order.
type chaosEpisode struct {
	Name    string
	Start   time.Duration // Planned, from the start of the run.
	Actions []chaosAction
}

// A chaosSchedule is the whole run's faults.
type chaosSchedule struct {
	Seed     uint64
	Duration time.Duration
	Episodes []chaosEpisode
}

// faults returns the number of fault actions in s.
func (s *chaosSchedule) faults() int {
	n := 0
	for _, e := range s.Episodes {
		for _, a := range e.Actions {
			if a.isFault() {
				n++
			}
		}
	}
	return n
}

func (s *chaosSchedule) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "chaos schedule of seed %d (-chaos.seed=%d -chaos.duration=%v): %d episodes, %d faults\n", s.Seed, s.Seed, s.Duration, len(s.Episodes), s.faults())
	for i, e := range s.Episodes {
		fmt.Fprintf(&b, "episode %d at +%.1fs: %s\n", i+1, e.Start.Seconds(), e.Name)
		for _, a := range e.Actions {
			fmt.Fprintf(&b, "    %v\n", a)
		}
	}
	return b.String()
}

// newChaosSchedule makes the schedule of seed for a run of about d: its
// episodes start within d (the last may end a little after it).
func newChaosSchedule(seed uint64, d time.Duration) *chaosSchedule {
	rng := rand.New(rand.NewPCG(seed, 0x5eed5c4ed))
	s := &chaosSchedule{Seed: seed, Duration: d}
	// between returns a duration in [lo, hi), in tenths of a second.
	between := func(lo, hi time.Duration) time.Duration {
		return lo + time.Duration(rng.Int64N(int64((hi-lo)/(100*time.Millisecond))))*100*time.Millisecond
	}
	// One fault of kind on node n from at, healed after hold.
	single := func(kind string, n int, at, hold time.Duration) []chaosAction {
		heal := map[string]string{"term": "start", "kill": "start", "stop": "cont", "cut": "heal"}[kind]
		return []chaosAction{{At: at, Do: kind, Node: n}, {At: at + hold, Do: heal, Node: n}}
	}
	kinds := []string{"term", "kill", "stop", "cut"}
	// Faults begin once the clients have written for a while.
	at := 4 * time.Second
	for at < d {
		var e chaosEpisode
		e.Start = at
		switch p := rng.IntN(100); {
		case p < 50:
			// One node: a clean stop, a crash, a hang or a cut link.
			kind, n := kinds[rng.IntN(len(kinds))], rng.IntN(len(chaosNodes))
			e.Name = fmt.Sprintf("%s %c", kind, chaosNodes[n])
			e.Actions = single(kind, n, at, between(time.Second, 7*time.Second))
		case p < 70:
			// Two nodes, each its own fault, overlapping.
			ns := rng.Perm(len(chaosNodes))[:2]
			var names []string
			for i, n := range ns {
				kind := kinds[rng.IntN(len(kinds))]
				names = append(names, fmt.Sprintf("%s %c", kind, chaosNodes[n]))
				e.Actions = append(e.Actions, single(kind, n, at+time.Duration(i)*between(0, 3*time.Second), between(time.Second, 6*time.Second))...)
			}
			e.Name = "overlapping: " + strings.Join(names, ", ")
		case p < 85:
			// Two to four nodes crash or stop, one after the other, and
			// come back in another order.
			k := 2 + rng.IntN(3)
			ns := rng.Perm(len(chaosNodes))[:k]
			t := at
			for _, n := range ns {
				e.Actions = append(e.Actions, chaosAction{At: t, Do: []string{"term", "kill"}[rng.IntN(2)], Node: n})
				t += between(0, 1500*time.Millisecond)
			}
			t += between(time.Second, 4*time.Second)
			back := slices.Clone(ns)
			rng.Shuffle(len(back), func(i, j int) { back[i], back[j] = back[j], back[i] })
			var order []string
			for _, n := range back {
				e.Actions = append(e.Actions, chaosAction{At: t, Do: "start", Node: n})
				order = append(order, string(chaosNodes[n]))
				t += between(0, 2*time.Second)
			}
			e.Name = fmt.Sprintf("%d nodes down, back in the order %s", k, strings.Join(order, ""))
		default:
			// All five at once, each by SIGKILL or SIGTERM; back all at
			// once, or one by one in a random order.
			for n := range chaosNodes {
				e.Actions = append(e.Actions, chaosAction{At: at, Do: []string{"term", "kill"}[rng.IntN(2)], Node: n})
			}
			t := at + between(time.Second, 4*time.Second)
			together := rng.IntN(2) == 0
			back := rng.Perm(len(chaosNodes))
			var order []string
			for _, n := range back {
				e.Actions = append(e.Actions, chaosAction{At: t, Do: "start", Node: n})
				order = append(order, string(chaosNodes[n]))
				if !together {
					t += between(200*time.Millisecond, 2*time.Second)
				}
			}
			if together {
				e.Name = "all five down, back all at once"
			} else {
				e.Name = "all five down, back in the order " + strings.Join(order, "")
			}
		}
		slices.SortStableFunc(e.Actions, func(a, b chaosAction) int { return int(a.At - b.At) })
		s.Episodes = append(s.Episodes, e)
		at = e.Actions[len(e.Actions)-1].At + between(2*time.Second, 5*time.Second)
	}
	return s
}

// checkHealed returns an error unless every fault of each episode is
// healed within it, each node suffers one fault at a time, and no action
// heals what is not broken.
func (s *chaosSchedule) checkHealed() error {
	for i, e := range s.Episodes {
		state := map[int]string{} // Node → its fault in force.
		for _, a := range e.Actions {
			cur := state[a.Node]
			switch a.Do {
			case "term", "kill", "stop", "cut":
				if cur != "" {
					return fmt.Errorf("episode %d: %v while node %c is under %s", i+1, a, chaosNodes[a.Node], cur)
				}
				state[a.Node] = a.Do
			case "start", "cont", "heal":
				want := map[string]string{"start": "term kill", "cont": "stop", "heal": "cut"}[a.Do]
				if cur == "" || !strings.Contains(want, cur) {
					return fmt.Errorf("episode %d: %v while node %c is under %q", i+1, a, chaosNodes[a.Node], cur)
				}
				delete(state, a.Node)
			default:
				return fmt.Errorf("episode %d: unknown action %v", i+1, a)
			}
		}
		if len(state) > 0 {
			return fmt.Errorf("episode %d (%s) ends with faults in force: %v", i+1, e.Name, state)
		}
	}
	return nil
}

// The schedule is a function of the seed and the duration alone, every
// episode heals what it breaks, and over a long run every kind of fault,
// and all five nodes down at once, occurs.
func TestChaosSchedule(t *testing.T) {
	for seed := range uint64(20) {
		s := newChaosSchedule(seed, 10*time.Minute)
		if err := s.checkHealed(); err != nil {
			t.Fatalf("seed %d: %v\n%v", seed, err, s)
		}
		if again := newChaosSchedule(seed, 10*time.Minute); again.String() != s.String() {
			t.Fatalf("seed %d gave two schedules:\n%v\n%v", seed, s, again)
		}
		text := s.String()
		for _, want := range []string{" term ", " kill ", " stop ", " cont ", " cut ", " heal ", " start ", "all five down"} {
			if !strings.Contains(text, want) {
				t.Errorf("seed %d: a 10-minute schedule without %q:\n%v", seed, want, s)
			}
		}
	}
	if a, b := newChaosSchedule(1, time.Minute).String(), newChaosSchedule(2, time.Minute).String(); a == b {
		t.Errorf("seeds 1 and 2 gave the same schedule:\n%v", a)
	}
}
