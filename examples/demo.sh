#!/usr/bin/env bash
# make demo: the demo API on :3000 and idemproxy (memory store) on :8080 in front of
# it. It runs the curl lines below once so you see each answer, then keeps both
# running for you to try them yourself, until Ctrl-C. DEMO_ONCE=1 stops after the tour.
# DEMO_STORE picks the store (default memory), e.g.
#   make demo DEMO_STORE='postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable'
#   make demo DEMO_STORE=redis://127.0.0.1:6379/0
# DEMO_API_PORT, DEMO_PROXY_PORT and DEMO_ADMIN_PORT move its ports (3000, 8080, 9090);
# a port already taken stops it at once, naming the variable.
set -euo pipefail
cd "$(dirname "$0")/.."
API=127.0.0.1:${DEMO_API_PORT:-3000}
PROXY=127.0.0.1:${DEMO_PROXY_PORT:-8080}
ADMIN=127.0.0.1:${DEMO_ADMIN_PORT:-9090}
STORE=${DEMO_STORE:-memory}

# Each port must be free: a server already there would answer the tour instead.
# Every taken port is named, then the demo gives up.
taken=0
for v in DEMO_API_PORT:"$API" DEMO_PROXY_PORT:"$PROXY" DEMO_ADMIN_PORT:"$ADMIN"; do
  name=${v%%:*} addr=${v#*:}
  if (exec 3<>"/dev/tcp/${addr%:*}/${addr##*:}") 2>/dev/null; then
    echo "make demo: port ${addr##*:} ($addr) is already in use; free it, or pick another with $name, e.g. make demo $name=$(( ${addr##*:} + 1 ))" >&2
    taken=1
  fi
done
[ "$taken" = 0 ] || exit 1

pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; }
trap cleanup EXIT INT TERM

./bin/demoapi --listen "$API" 2>/tmp/idemproxy-demoapi.log & pids+=($!)
# The /webhooks route (examples/demo.yaml) verifies signatures with this secret.
export DEMO_WEBHOOK_SECRET=${DEMO_WEBHOOK_SECRET:-whsec_ZGVtby13ZWJob29rLXNlY3JldA==}
./bin/idemproxy --config examples/demo.yaml --listen "$PROXY" --upstream "http://$API" --admin "$ADMIN" --store "$STORE" --log-format text 2>/tmp/idemproxy-demo.log & pids+=($!)
for _ in $(seq 100); do
  if ! kill -0 "${pids[0]}" 2>/dev/null; then echo "the demo API did not start:"; cat /tmp/idemproxy-demoapi.log; exit 1; fi
  if ! kill -0 "${pids[1]}" 2>/dev/null; then echo "idemproxy did not start:"; cat /tmp/idemproxy-demo.log; exit 1; fi
  curl -fsS "http://$ADMIN/healthz" >/dev/null 2>&1 && curl -fsS "http://$API/charges" >/dev/null 2>&1 && break
  sleep 0.1
done

run() { printf '\n\033[1m$ %s\033[0m\n' "$*"; eval "$@"; echo; }
key="demo-$(date +%s)"
echo "idemproxy on http://$PROXY (store: ${STORE%%\?*}) in front of the demo API on http://$API (logs: /tmp/idemproxy-demo.log)"
echo "== 1. The first request runs; the retry with the same key is replayed, not run again:"
run "curl -sS -i -X POST http://$PROXY/charges -H 'Idempotency-Key: $key-a' -H 'Content-Type: application/json' -d '{\"amount\": 100}'"
run "curl -sS -i -X POST http://$PROXY/charges -H 'Idempotency-Key: $key-a' -H 'Content-Type: application/json' -d '{\"amount\": 100}'"
echo "== 2. The same key with a different body is refused (422):"
run "curl -sS -i -X POST http://$PROXY/charges -H 'Idempotency-Key: $key-a' -H 'Content-Type: application/json' -d '{\"amount\": 999}'"
echo "== 3. A duplicate that arrives while the first is still running gets 409 + Retry-After:"
run "curl -sS -o /dev/null -X POST 'http://$PROXY/charges?delay=2s' -H 'Idempotency-Key: $key-b' -d '{\"amount\": 5}' & first=\$!; until ./bin/idemproxy keys get $key-b --admin $ADMIN >/dev/null 2>&1; do sleep 0.1; done; curl -sS -i -X POST 'http://$PROXY/charges?delay=2s' -H 'Idempotency-Key: $key-b' -d '{\"amount\": 5}'; wait \$first"
echo "== 4. Two charges were created upstream, not five:"
run "curl -sS http://$API/charges"
echo "== 5. The stored record, through the admin API:"
run "./bin/idemproxy keys get $key-a --admin $ADMIN"
echo "== 6. A signed webhook (Standard Webhooks) delivered twice runs once; a forged one gets 401:"
event='{"type":"invoice.paid","data":{"invoice":"in_42"}}'
signed=""
while IFS= read -r h; do signed+=" -H '$h'"; done < <(./bin/idemproxy sign --webhook standard --secret env:DEMO_WEBHOOK_SECRET --id "msg_$key" --body "$event")
run "curl -sS -i -X POST http://$PROXY/webhooks$signed -d '$event'"
run "curl -sS -i -X POST http://$PROXY/webhooks$signed -d '$event'"
run "curl -sS -i -X POST http://$PROXY/webhooks -H 'webhook-id: msg_$key-forged' -H 'webhook-timestamp: $(date +%s)' -H 'webhook-signature: v1,Zm9yZ2Vk' -d '$event'"
run "curl -sS http://$API/webhooks"

if [ "${DEMO_ONCE:-}" = 1 ]; then exit 0; fi
cat <<MSG
Both are still running. Try:
  curl -i -X POST http://$PROXY/charges -H 'Idempotency-Key: my-key' -d '{"amount": 42}'
  curl -i -X POST http://$PROXY/flaky   -H 'Idempotency-Key: k5' -d '{}'     # 503: not stored, a retry runs again
  curl -s http://$ADMIN/metrics | grep idemproxy_requests_total
  mapfile -t h < <(bin/idemproxy sign --webhook standard --secret env:DEMO_WEBHOOK_SECRET --id msg_1 --body '{"n":1}')
  curl -i -X POST http://$PROXY/webhooks "\${h[@]/#/-H}" -d '{"n":1}'   # with DEMO_WEBHOOK_SECRET=$DEMO_WEBHOOK_SECRET
Press Ctrl-C to stop.
MSG
wait
