#!/usr/bin/env node
// s3rver.js — starts one S3-compatible test server (@20minutes/s3rver, the
// version pinned in package-lock.json) on loopback for the integration tests.
//
//   node tests/s3/s3rver.js --port P --dir DIR [--bucket NAME ...]
//        [--access-key K --secret-key S] [--address 127.0.0.1]
//        [--service-endpoint localhost] [--tls-cert PEM --tls-key PEM]
//        [--verbose] [--raw-vhost]
//
// Prints exactly one line "ready <port>" on stdout once it listens (with
// --port 0 the kernel picks the port and that line tells which).  Exits 0
// on SIGTERM or SIGINT.  Objects live as plain files under DIR, so a server
// restarted on the same DIR serves what it stored before.  See README.md
// beside this file for what the server does and does not do.
'use strict'

const crypto = require('node:crypto')
const fs = require('node:fs')
const path = require('node:path')

// ---- command line -----------------------------------------------------------
function usage(msg) {
  if (msg) process.stderr.write(`s3rver.js: ${msg}\n`)
  process.stderr.write(
    'usage: node s3rver.js --port P --dir DIR [--bucket NAME ...] ' +
      '[--access-key K --secret-key S] [--address A] [--service-endpoint HOST] ' +
      '[--tls-cert PEM --tls-key PEM] [--verbose] [--raw-vhost]\n'
  )
  process.exit(2)
}

const opt = {
  port: undefined,
  dir: undefined,
  buckets: [],
  accessKey: undefined,
  secretKey: undefined,
  address: '127.0.0.1',
  serviceEndpoint: 'localhost',
  verbose: false,
  rawVhost: false,
  tlsCert: undefined,
  tlsKey: undefined,
}
{
  const argv = process.argv.slice(2)
  const value = (i) => {
    if (i + 1 >= argv.length) usage(`${argv[i]} needs a value`)
    return argv[i + 1]
  }
  for (let i = 0; i < argv.length; i++) {
    switch (argv[i]) {
      case '--port':
        opt.port = value(i++)
        break
      case '--dir':
        opt.dir = value(i++)
        break
      case '--bucket':
        opt.buckets.push(value(i++))
        break
      case '--access-key':
        opt.accessKey = value(i++)
        break
      case '--secret-key':
        opt.secretKey = value(i++)
        break
      case '--address':
        opt.address = value(i++)
        break
      case '--service-endpoint':
        opt.serviceEndpoint = value(i++)
        break
      case '--verbose':
        opt.verbose = true
        break
      case '--tls-cert':
        opt.tlsCert = value(i++)
        break
      case '--tls-key':
        opt.tlsKey = value(i++)
        break
      case '--raw-vhost':
        opt.rawVhost = true
        break
      case '-h':
      case '--help':
        usage()
        break
      default:
        usage(`unknown argument ${argv[i]}`)
    }
  }
  if (opt.port === undefined || !/^\d+$/.test(opt.port) || Number(opt.port) > 65535) {
    usage('--port P is required (0..65535)')
  }
  opt.port = Number(opt.port)
  if (!opt.dir) usage('--dir DIR is required')
  if ((opt.accessKey === undefined) !== (opt.secretKey === undefined)) {
    usage('--access-key and --secret-key go together')
  }
  if ((opt.tlsCert === undefined) !== (opt.tlsKey === undefined)) {
    usage('--tls-cert and --tls-key go together')
  }
}

// ---- DES for ListObjectsV2 continuation tokens --------------------------------
// s3rver encrypts its continuation tokens with single DES ('des', i.e.
// DES-CBC), which OpenSSL 3 only has in its legacy provider: without it every
// truncated ListObjectsV2 answers 500 InternalError.  Single DES is 3DES-EDE
// with K1 = K2 = K3, which the default provider has, so map 'des' onto that:
// the tokens are byte-for-byte what s3rver would produce with the legacy
// provider (checked with `node --openssl-legacy-provider`).
function desAvailable() {
  try {
    crypto.createCipheriv('des', Buffer.alloc(8), Buffer.alloc(8))
    return true
  } catch {
    return false
  }
}
if (!desAvailable()) {
  const wrap = (orig) =>
    function (algorithm, key, iv, options) {
      if (typeof algorithm === 'string' && ['des', 'des-cbc'].includes(algorithm.toLowerCase())) {
        const k = Buffer.from(key)
        return orig.call(this, 'des-ede3-cbc', Buffer.concat([k, k, k]), iv, options)
      }
      return orig.call(this, algorithm, key, iv, options)
    }
  crypto.createCipheriv = wrap(crypto.createCipheriv)
  crypto.createDecipheriv = wrap(crypto.createDecipheriv)
}

// ---- Node 18 -----------------------------------------------------------------
// The package asks for Node >= 24 but runs on Node 20 as it is.  On Node 18
// (Debian 12's nodejs) the only thing missing is Array.prototype.toReversed,
// which @koa/router calls on every request (500 InternalError without it).
if (!Array.prototype.toReversed) {
  Object.defineProperty(Array.prototype, 'toReversed', {
    value: function toReversed() {
      return Array.prototype.slice.call(this).reverse()
    },
    writable: true,
    configurable: true,
  })
}

// ---- metadata files written whole -------------------------------------------
// s3rver writes an object's metadata.json and .md5 with fs.writeFile, which
// truncates the file and then writes it: a listing or HEAD that reads it in
// between fails "Unexpected end of JSON input" (500, seen under a dozen
// daemons' load), and a server killed there keeps the empty file, so every
// later listing of its prefix fails.  A real store never shows half-written
// metadata: write these files under a temporary name (which s3rver's
// listings skip: they take only "._S3rver_object" files) and rename it.
{
  const fsp = fs.promises
  const writeFile = fsp.writeFile
  let seq = 0
  fsp.writeFile = async function writeWhole(file, data, options) {
    if (typeof file !== 'string' || !file.includes('._S3rver_')) {
      return writeFile.call(this, file, data, options)
    }
    const tmp = `${file}.tmp-${process.pid}-${seq++}`
    await writeFile.call(this, tmp, data, options)
    await fsp.rename(tmp, file)
  }
}

// ---- the server ---------------------------------------------------------------
let S3rver, AWSAccount, S3Error
try {
  S3rver = require('@20minutes/s3rver')
  AWSAccount = require('@20minutes/s3rver/lib/models/account')
  S3Error = require('@20minutes/s3rver/lib/models/error')
} catch (err) {
  process.stderr.write(
    `s3rver.js: cannot load @20minutes/s3rver (${err.message}); run tests/s3/setup.sh\n`
  )
  process.exit(3)
}

// Virtual-hosted requests and SigV4: s3rver's vhost middleware rewrites
// Host: ckpt.s3.localhost + path /k into /ckpt/k, and its authentication
// then checks the SigV4 signature over the canonical URI /ckpt/k — right
// for SigV2, wrong for SigV4, where the canonical URI is the path as sent
// (/k).  So every correctly signed virtual-hosted request would get
// SignatureDoesNotMatch.  Recompute the canonical URI the SigV4 way when the
// Host header names the bucket (same rule as lib/middleware/vhost.js);
// path-style requests are untouched.  --raw-vhost keeps s3rver's behaviour.
if (!opt.rawVhost) {
  const { isIP } = require('node:net')
  const { hostname } = require('node:os')
  const v4 = require('@20minutes/s3rver/lib/signature/v4')
  const escaped = opt.serviceEndpoint.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')
  const pattern = new RegExp(`^(?:(.+)\\.)?s3(-website)?([-.].+)?\\.${escaped}$`)
  const vhostBucket = (host) => {
    const name = String(host || '')
      .replace(/:\d+$/, '')
      .replace(/^\[(.*)\]$/, '$1')
    const m = pattern.exec(name)
    if (m) return m[1]
    if (!isIP(name) && !['localhost', hostname()].includes(name)) return name
    return undefined
  }
  const getStringToSign = v4.getStringToSign
  v4.getStringToSign = (canonicalRequest, request) => {
    const bucket = vhostBucket(canonicalRequest.headers.host)
    if (bucket !== undefined) {
      const prefix = `/${encodeURIComponent(bucket)}`
      const uri = canonicalRequest.uri
      if (uri === prefix || uri.startsWith(`${prefix}/`)) {
        canonicalRequest = { ...canonicalRequest, uri: uri.slice(prefix.length) || '/' }
      }
    }
    return getStringToSign(canonicalRequest, request)
  }
}

// s3rver knows one account with the key pair S3RVER / S3RVER, in a
// process-wide registry; replace it when other keys are asked for, so the
// default pair is refused (InvalidAccessKeyId) by such a server.
if (opt.accessKey !== undefined) {
  AWSAccount.DUMMY_ACCOUNT.revokeAccessKey('S3RVER')
  AWSAccount.DUMMY_ACCOUNT.createKeyPair(opt.accessKey, opt.secretKey)
}

fs.mkdirSync(opt.dir, { recursive: true })
const server = new S3rver({
  port: opt.port,
  address: opt.address,
  directory: path.resolve(opt.dir),
  silent: !opt.verbose,
  // Virtual-hosted requests are recognised by Host: <bucket>.s3.<serviceEndpoint>
  // (also <bucket>.s3.<region>.<serviceEndpoint>); see README.md.
  serviceEndpoint: opt.serviceEndpoint,
  configureBuckets: opt.buckets.map((name) => ({ name, configs: [] })),
  allowMismatchedSignatures: false,
  resetOnClose: false,
  // HTTPS instead of HTTP when given a certificate and its key (PEM files).
  ...(opt.tlsCert ? { cert: fs.readFileSync(opt.tlsCert), key: fs.readFileSync(opt.tlsKey) } : {}),
})
// Logs go to stderr: stdout carries only the "ready" line.
for (const t of server.logger.transports) {
  t.stderrLevels = { error: true, warn: true, info: true, http: true, verbose: true, debug: true }
}
// Koa's default error printer is silenced with the logger; unexpected
// errors (500s, crashes inside s3rver) always go to stderr.
server.on('error', (err, ctx) => {
  if (err instanceof S3Error && err.status < 500) return
  // A client that went away mid-response (closed a Range read, timed out).
  if (['ERR_STREAM_PREMATURE_CLOSE', 'ECONNRESET', 'EPIPE'].includes(err.code)) return
  const where = ctx ? `${ctx.method} ${ctx.url}` : ''
  process.stderr.write(`s3rver.js: ${where}: ${err.stack || err}\n`)
})

let stopping = false
function stop(signal) {
  if (stopping) return
  stopping = true
  if (opt.verbose) process.stderr.write(`s3rver.js: ${signal}, stopping\n`)
  const hard = setTimeout(() => process.exit(0), 3000)
  hard.unref()
  if (!server.httpServer) process.exit(0)
  server.httpServer.closeIdleConnections?.()
  // Requests in flight get a second to finish; then the connections are cut.
  setTimeout(() => server.httpServer.closeAllConnections?.(), 1000).unref()
  server.close().then(
    () => process.exit(0),
    () => process.exit(0)
  )
}
process.on('SIGTERM', () => stop('SIGTERM'))
process.on('SIGINT', () => stop('SIGINT'))

server.run().then(
  (addr) => {
    process.stdout.write(`ready ${addr.port}\n`)
  },
  (err) => {
    process.stderr.write(`s3rver.js: cannot start on ${opt.address}:${opt.port}: ${err.message}\n`)
    process.exit(1)
  }
)
