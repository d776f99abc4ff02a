# An OpenAI-compatible chat endpoint that thinks for DELAY seconds per answer (a model's latency):
# the first answer of an activation calls file.write, the next one waits for a signal (the agent
# is then waiting, and nothing nudges it: `run --until-idle` ends).
import json, sys, time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
DELAY = float(sys.argv[2])
class H(BaseHTTPRequestHandler):
    def log_message(self, *a): pass
    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers['content-length'])))
        time.sleep(DELAY)
        tool_results = [m for m in body['messages'] if m.get('role') == 'tool']
        if not tool_results:
            msg = {"role": "assistant", "content": None, "tool_calls": [{"id": "c1", "type": "function",
                   "function": {"name": "file_write", "arguments": json.dumps({"path": "/workspace/a.md", "content": "x"})}}]}
        else:
            msg = {"role": "assistant", "content": None, "tool_calls": [{"id": "c2", "type": "function",
                   "function": {"name": "coordination_wait_for_signal", "arguments": json.dumps({"reason": "done"})}}]}
        out = json.dumps({"id": "x", "object": "chat.completion", "model": "m", "choices": [{"index": 0, "message": msg, "finish_reason": "stop"}],
                          "usage": {"prompt_tokens": 10, "completion_tokens": 5}}).encode()
        self.send_response(200); self.send_header('content-type', 'application/json'); self.send_header('content-length', str(len(out))); self.end_headers(); self.wfile.write(out)
ThreadingHTTPServer(('127.0.0.1', int(sys.argv[1])), H).serve_forever()
