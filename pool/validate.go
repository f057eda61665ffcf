package pool

import (
	"fmt"

	"github.com/redeq-go/redeq/config"
)

// Validate reports why job cannot be added: a nil job, a bad topic or id, a
// negative delay, a bad retry setting, or a body over maxBody bytes.
// An empty id is valid: Add assigns one.
func Validate(job *Job, maxBody int) error {
	if job == nil {
		return invalid("nil job")
	}
	if err := config.CheckName("topic", job.Topic); err != nil {
		return invalid("%v", err)
	}
	if job.ID != "" {
		if err := CheckID(job.ID); err != nil {
			return err
		}
	}
	if job.Delay < 0 {
		return invalid("job %q: negative Delay %v", job.ID, job.Delay)
	}
	if !job.RunAt.IsZero() && job.RunAt.After(MaxDue) {
		// The field's name is built only for the error: Add is hot.
		return checkDue("job "+quote(job.ID)+": RunAt", job.RunAt)
	}
	if job.MaxRetries < -1 || job.MaxRetries > config.MaxRetriesLimit {
		return invalid("job %q: MaxRetries %d is out of range -1..%d", job.ID, job.MaxRetries, config.MaxRetriesLimit)
	}
	if job.RetryIntervals != nil {
		if len(job.RetryIntervals) == 0 {
			return invalid("job %q: RetryIntervals is empty (use nil for the default)", job.ID)
		}
		if err := config.CheckIntervals("RetryIntervals", job.RetryIntervals); err != nil {
			return invalid("job %q: %v", job.ID, err)
		}
	}
	if err := checkHeaders(job.ID, job.Headers); err != nil {
		return err
	}
	if len(job.Body) > maxBody {
		return invalid("job %q: body is %d bytes, over MaxBodyBytes %d", job.ID, len(job.Body), maxBody)
	}
	return nil
}

// CheckID reports why id cannot name a job.
func CheckID(id string) error {
	if err := config.CheckName("id", id); err != nil {
		return invalid("%v", err)
	}
	return nil
}

// CheckTopic reports why topic cannot name a topic.
func CheckTopic(topic string) error {
	if err := config.CheckName("topic", topic); err != nil {
		return invalid("%v", err)
	}
	return nil
}

func quote(s string) string { return fmt.Sprintf("%q", s) }

// checkHeaders reports why hs cannot be a job's headers: too many, too
// large, or a key that is empty or holds a control character.
func checkHeaders(id string, hs map[string]string) error {
	if len(hs) > config.MaxHeaders {
		return invalid("job %q: %d headers, more than %d", id, len(hs), config.MaxHeaders)
	}
	size := 0
	for k, v := range hs {
		if k == "" {
			return invalid("job %q: a header has an empty key", id)
		}
		for _, r := range k {
			if r < 0x20 || r == 0x7f {
				return invalid("job %q: header key %q has a control character", id, k)
			}
		}
		size += len(k) + len(v)
	}
	if size > config.MaxHeaderBytes {
		return invalid("job %q: headers are %d bytes, more than %d", id, size, config.MaxHeaderBytes)
	}
	return nil
}
