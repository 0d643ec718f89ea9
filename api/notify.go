package api

import "time"

// NotifyQueue is the controller's notifications not sent yet, kept so
// that a restart or a new leader sends them, and the dry run's decision
// and the pause last told: written by the leading controller in
// NotifyQueueKey whenever one changes, read by the controller that next
// leads, and by nobody else.
type NotifyQueue struct {
	// V is the format's version (Version when written; 1 when missing).
	V int `json:"v"`
	// Queued are the messages in the order they are to be sent.
	Queued []QueuedNotification `json:"queued"`
	// DryRunTold is the dry run's decision last told (its Out and In), so
	// that a restart does not tell it again.
	DryRunTold *Decision `json:"dryRunTold,omitempty"`
	// Pause is the pause last told; none when none was, or its resume
	// was.
	Pause *Pause `json:"pause,omitempty"`
}

// QueuedNotification is one message for one notification URL.
type QueuedNotification struct {
	// To names the URL by the start of its SHA-256, not by its text (it
	// may hold a token); a message to a URL no longer configured is
	// dropped.
	To      string `json:"to"`
	Message string `json:"message"`
	// At is when the message was queued.
	At time.Time `json:"at"`
	// Attempts is how many sends of it failed.
	Attempts int `json:"attempts,omitempty"`
}

// Validate reports the fields that are missing or wrong.
func (q NotifyQueue) Validate() error {
	var errs []error
	for _, n := range q.Queued {
		if n.To == "" {
			errs = append(errs, missing("queued[].to"))
		}
		if n.At.IsZero() {
			errs = append(errs, missing("queued[].at"))
		}
	}
	return joinFields(errs)
}

// MarshalJSON writes the queue with V = Version.
func (q NotifyQueue) MarshalJSON() ([]byte, error) {
	type wire NotifyQueue
	w := wire(q)
	return writeDoc(&w, &w.V)
}

// UnmarshalJSON reads a queue of any version; a missing one is 1.
func (q *NotifyQueue) UnmarshalJSON(b []byte) error {
	type wire NotifyQueue
	w := wire(*q)
	if err := readDoc(b, &w, &w.V); err != nil {
		return err
	}
	*q = NotifyQueue(w)
	return nil
}
