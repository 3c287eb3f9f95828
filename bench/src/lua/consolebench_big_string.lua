-- consolebench: one 4 MB string at KEYS[1], made in Redis so that 4 MB need not cross the wire.
redis.call('SET', KEYS[1], string.rep('x', 4 * 1024 * 1024))
