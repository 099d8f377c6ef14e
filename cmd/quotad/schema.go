package main

import (
	"context"
	"database/sql"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/quota-platform/quota/config"
	sqlschema "github.com/quota-platform/quota/sql"
)

// shardSchemaTimeout bounds how long start-up waits for one shard to answer
// before it goes on without checking that shard's schema.
const shardSchemaTimeout = 5 * time.Second

// prepareSchema does QUOTA_SCHEMA_ON_START for every shard, all at once,
// before quotad answers a check. Without it a shard that was never migrated
// (or is behind a new binary) lets quotad start and answer checks while
// every analytics flush and cold write fails: only log lines would tell,
// and the calls' figures would be lost. A shard that does not answer is
// left for later, with a warning: quotad answers checks without MySQL, and
// its readiness check reports the shard.
func prepareSchema(ctx context.Context, s config.Settings, dbs []*sql.DB, log *slog.Logger) error {
	if s.SchemaOnStart == config.SchemaOff || (!s.Analytics && !s.Tiering) {
		return nil
	}
	errs := make([]error, len(dbs))
	var wg sync.WaitGroup
	for i, db := range dbs {
		wg.Go(func() {
			errs[i] = prepareShardSchema(ctx, s.SchemaOnStart, i, shardDatabase(s.MySQLShards[i]), db, log)
		})
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

func prepareShardSchema(ctx context.Context, mode config.SchemaOnStart, i int, name string, db *sql.DB, log *slog.Logger) error {
	pctx, cancel := context.WithTimeout(ctx, shardSchemaTimeout)
	defer cancel()
	if err := db.PingContext(pctx); err != nil {
		log.Warn("mysql shard not reachable at start; its schema is not checked", "shard", i, "database", name, "err", err)
		return nil
	}
	if mode == config.SchemaApply {
		// Apply waits up to 30 s for another instance applying the same files.
		actx, cancel := context.WithTimeout(ctx, 2*time.Minute)
		defer cancel()
		applied, err := sqlschema.Apply(actx, db)
		if err != nil {
			return fmt.Errorf("mysql shard %d (database %s): QUOTA_SCHEMA_ON_START=apply: %w", i, name, err)
		}
		if len(applied) > 0 {
			log.Info("schema applied", "shard", i, "database", name, "files", applied)
		}
		return nil
	}
	pending, err := sqlschema.Pending(pctx, db)
	if err != nil {
		log.Warn("mysql shard's schema could not be read at start; not checked", "shard", i, "database", name, "err", err)
		return nil
	}
	if len(pending) > 0 {
		return fmt.Errorf("mysql shard %d (database %s) lacks schema file(s) %s: run `quotad migrate-schema` with the same QUOTA_MYSQL_SHARDS first (or set QUOTA_SCHEMA_ON_START=apply)",
			i, name, strings.Join(pending, ", "))
	}
	return nil
}

// shardDatabase is the database a shard's DSN names, for messages (the DSN
// itself may hold a password).
func shardDatabase(dsn string) string {
	cfg, err := mysql.ParseDSN(dsn)
	if err != nil || cfg.DBName == "" {
		return "?"
	}
	return cfg.DBName
}
