// contrib/bench/npm/redlock-loop.js PORTS SECONDS REPEAT
// The comparison for libdlock's redlock backend: the `redlock` npm package (4.2.x) over
// ioredis, taking and releasing one resource back to back on the same
// masters libdlock's redlock backend was measured on, with no retries (one
// attempt, as dlock_acquire(lock, 0)). Prints one line per repeat:
// "redlock-npm acquire+release/s N".
'use strict';
const Redis = require('ioredis');
const Redlock = require('redlock');

async function main() {
    const ports = process.argv[2].split(',').map(Number);
    const seconds = Number(process.argv[3] || 3);
    const repeat = Number(process.argv[4] || 3);
    const clients = ports.map((port) => new Redis({ host: '127.0.0.1', port, lazyConnect: false }));
    const redlock = new Redlock(clients, { driftFactor: 0.01, retryCount: 0 });
    for (let r = 0; r < repeat; r++) {
        let n = 0;
        const end = process.hrtime.bigint() + BigInt(Math.round(seconds * 1e9));
        const start = process.hrtime.bigint();
        while (process.hrtime.bigint() < end) {
            const lock = await redlock.lock('bench-npm-redlock', 3000);
            await lock.unlock();
            n++;
        }
        const secs = Number(process.hrtime.bigint() - start) / 1e9;
        console.log(`redlock-npm acquire+release/s ${(n / secs).toFixed(1)}`);
    }
    clients.forEach((c) => c.disconnect());
}

main().catch((e) => {
    console.error(`redlock-loop: ${e.message}`);
    process.exit(1);
});
