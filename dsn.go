package sqlflight

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/sqlflight/sqlflight/internal/annotation"
	"github.com/sqlflight/sqlflight/internal/dsnparam"
	"github.com/sqlflight/sqlflight/internal/feed"
)

// dsnPrefix marks the DSN parameters that configure sqlflight itself. They
// are removed before the DSN reaches the wrapped driver.
const dsnPrefix = dsnparam.Prefix

// ErrBadDSN is wrapped by the error of opening a DSN whose sqlflight.*
// parameters are unknown or malformed.
var ErrBadDSN = dsnparam.ErrBad

// applyDSN sets the Options fields named by DSN parameters.
func applyDSN(o *Options, params map[string]string) error {
	for k, v := range params {
		var err error
		switch k {
		case "max_bytes":
			o.MaxBytes, err = annotation.Bytes(v)
		case "neg_max_bytes":
			o.NegMaxBytes, err = annotation.Bytes(v)
		case "max_result_bytes":
			o.MaxResultBytes, err = annotation.Bytes(v)
		case "max_result_rows":
			o.MaxResultRows, err = dsnparam.PositiveInt(v)
		case "max_conns":
			o.MaxConns, err = dsnparam.PositiveInt(v)
		case "batch_max_wait":
			o.BatchMaxWait, err = time.ParseDuration(v)
		case "batch_max_keys":
			o.BatchMaxKeys, err = dsnparam.PositiveInt(v)
		case "no_batch":
			o.NoBatch, err = strconv.ParseBool(v)
		case "max_inflight":
			o.MaxInflight, err = dsnparam.PositiveInt(v)
		case "max_refreshes":
			o.MaxRefreshes, err = dsnparam.PositiveInt(v)
		case "breaker_failures":
			o.BreakerFailures, err = dsnparam.PositiveInt(v)
		case "breaker_probes":
			o.BreakerProbes, err = dsnparam.PositiveInt(v)
		case "origin_timeout":
			o.OriginTimeout, err = annotation.Duration(v)
		case "queue_timeout":
			o.QueueTimeout, err = annotation.Duration(v)
		case "breaker_timeout":
			o.BreakerTimeout, err = annotation.Duration(v)
		case "max_stale":
			o.MaxStale, err = time.ParseDuration(v)
		case "writes_when_open":
			o.WritesWhenOpen, err = strconv.ParseBool(v)
		case "key_prefix":
			o.KeyPrefix = v
		case "redis_timeout":
			o.RedisTimeout, err = annotation.Duration(v)
		case "lease_ttl":
			o.LeaseTTL, err = annotation.Duration(v)
		case "shared_secret":
			o.SharedSecret = v // never in an error: nothing here can fail
		case "shared_previous_secret":
			o.SharedPreviousSecret = v
		case "shared_encrypt":
			o.SharedEncrypt, err = strconv.ParseBool(v)
		case "insecure_trust_shared_tier":
			o.InsecureTrustSharedTier, err = strconv.ParseBool(v)
		case "feed":
			var m string
			m, err = feed.ParseMode(v)
			o.Feed = FeedMode(m)
		case "feed_publication":
			o.FeedPublication = v
			if !feed.ValidPublication(v) {
				err = errors.New("1 to 63 letters, digits, '_' or '$'")
			}
		case "feed_dsn":
			if _, perr := pgx.ParseConfig(v); perr != nil {
				return fmt.Errorf("%w: %sfeed_dsn does not parse as a PostgreSQL DSN (the value is not shown)", ErrBadDSN, dsnPrefix)
			}
			o.FeedDSN = v
		case "feed_lease_ttl":
			o.FeedLeaseTTL, err = annotation.Duration(v)
		case "strict":
			o.Strict, err = strconv.ParseBool(v)
		case "default":
			// A whole default policy in annotation syntax, e.g. "soft=30s hard=5m".
			var a annotation.Annotation
			if a, err = annotation.Parse(strings.ReplaceAll(v, ",", " ")); err == nil {
				o.Default = Policy(a.Merge(annotation.Fields(o.Default)))
			}
		default:
			return dsnparam.Unknown(k)
		}
		if err != nil {
			return dsnparam.Malformed(k, v, err)
		}
	}
	return nil
}
