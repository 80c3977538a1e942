package annotation

import (
	"encoding/json"
	"errors"
	"time"
)

// JSON is Fields as sqlflight encodes a policy (in an Explanation): every
// duration as a Go duration string ("30s", "5m0s"), each field under the
// name and tag the root's Policy gives it.
type JSON struct {
	Soft       JSONDuration `json:"soft,omitempty"`
	Hard       JSONDuration `json:"hard,omitempty"`
	Neg        JSONDuration `json:"neg,omitempty"`
	Jitter     float64      `json:"jitter,omitempty"`
	Beta       float64      `json:"beta,omitempty"`
	MaxRows    int          `json:"maxrows,omitempty"`
	MaxBytes   int64        `json:"maxbytes,omitempty"`
	Wait       JSONDuration `json:"wait,omitempty"`
	Timeout    JSONDuration `json:"timeout,omitempty"`
	Tables     []string     `json:"tables,omitempty"`
	Name       string       `json:"name,omitempty"`
	Coalesce   bool         `json:"coalesce,omitempty"`
	NoCoalesce bool         `json:"nocoalesce,omitempty"`
	NoBatch    bool         `json:"nobatch,omitempty"`
	NoCache    bool         `json:"nocache,omitempty"`
	Off        bool         `json:"off,omitempty"`
}

// ToJSON returns f in its JSON form.
func ToJSON(f Fields) JSON {
	return JSON{
		Soft: JSONDuration(f.Soft), Hard: JSONDuration(f.Hard), Neg: JSONDuration(f.Neg),
		Jitter: f.Jitter, Beta: f.Beta, MaxRows: f.MaxRows, MaxBytes: f.MaxBytes,
		Wait: JSONDuration(f.Wait), Timeout: JSONDuration(f.Timeout), Tables: f.Tables, Name: f.Name,
		Coalesce: f.Coalesce, NoCoalesce: f.NoCoalesce, NoBatch: f.NoBatch, NoCache: f.NoCache, Off: f.Off,
	}
}

// Fields returns the fields j encodes.
func (j JSON) Fields() Fields {
	return Fields{
		Soft: time.Duration(j.Soft), Hard: time.Duration(j.Hard), Neg: time.Duration(j.Neg),
		Jitter: j.Jitter, Beta: j.Beta, MaxRows: j.MaxRows, MaxBytes: j.MaxBytes,
		Wait: time.Duration(j.Wait), Timeout: time.Duration(j.Timeout), Tables: j.Tables, Name: j.Name,
		Coalesce: j.Coalesce, NoCoalesce: j.NoCoalesce, NoBatch: j.NoBatch, NoCache: j.NoCache, Off: j.Off,
	}
}

// JSONDuration is a time.Duration that encodes as a Go duration string and
// decodes from one or from a number of nanoseconds.
type JSONDuration time.Duration

// MarshalJSON encodes d as a Go duration string.
func (d JSONDuration) MarshalJSON() ([]byte, error) {
	return json.Marshal(time.Duration(d).String())
}

// UnmarshalJSON decodes a Go duration string or a number of nanoseconds.
func (d *JSONDuration) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		var n int64
		if json.Unmarshal(b, &n) != nil {
			return errors.New("sqlflight: a duration must be a string such as \"30s\"")
		}
		*d = JSONDuration(n)
		return nil
	}
	v, err := time.ParseDuration(s)
	if err != nil {
		return errors.New("sqlflight: a duration must be a string such as \"30s\"")
	}
	*d = JSONDuration(v)
	return nil
}
