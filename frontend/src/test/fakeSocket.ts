// A WebSocket stand-in for component tests: records what was opened, and lets a test push the
// server's messages (the e2e tests use the real sockets). The header's bell opens its own
// socket on every page: it is kept apart (`bell`), so `opened` holds the page's.
import { vi } from "vitest";

export class FakeSocket {
  static opened: FakeSocket[] = [];
  static bell: FakeSocket[] = [];
  onopen: (() => void) | null = null;
  onmessage: ((ev: { data: string }) => void) | null = null;
  onclose: ((ev: { code: number }) => void) | null = null;
  closed = false;

  constructor(public url: string) {
    (url.includes("/ws/notifications/") ? FakeSocket.bell : FakeSocket.opened).push(this);
    queueMicrotask(() => this.onopen?.());
  }

  send() {}

  close() {
    this.closed = true;
  }

  /** The server sends `message` (JSON). */
  push(message: unknown) {
    this.onmessage?.({ data: JSON.stringify(message) });
  }
}

export function fakeSockets() {
  FakeSocket.opened = [];
  FakeSocket.bell = [];
  vi.stubGlobal("WebSocket", FakeSocket);
  return FakeSocket.opened;
}
