// Type declarations of Suzumio toolpack modules, for editor completion and checking
// (`// @ts-check` in a .mjs file, or a jsconfig.json with "checkJs": true). Nothing imports this
// file at run time; refer to it from JSDoc:
//
//   /** @type {import("../../docs/types/suzumio").RunnerToolpackFactory} */
//   export function createRunnerToolpack(context) { … }
//
// The reference is docs/toolpacks.md and docs/runtime.md. Both sides run on QuickJS, not Node:
// see docs/runtime.md for the built-in modules (node:path, node:crypto, …) and globals.

// ---------------------------------------------------------------------------------------------
// Results

/** A plain text result. */
export interface TextResult {
  /** The text the model gets. */
  output: string;
  /** A short title shown in tool-call lists. */
  title?: string;
  /** Anything JSON, kept with the call's record (not sent to the model). */
  metadata?: Record<string, unknown>;
}

export interface TextBlock {
  type: "text";
  text: string;
}

/** An image for vision models: at most 5 MiB decoded; saved under the agent's artifacts. */
export interface ImageBlock {
  type: "image";
  /** Base64 of the image's bytes. */
  data: string;
  mimeType: "image/png" | "image/jpeg" | "image/gif" | "image/webp";
}

export interface ResourceLinkBlock {
  type: "resource_link";
  uri: string;
  name: string;
}

export type ContentBlock = TextBlock | ImageBlock | ResourceLinkBlock;

/** A rich result, shaped like an MCP tool result. At most 8 blocks and 7 MiB as JSON. */
export interface RichResult {
  content: ContentBlock[];
  /** `true`: the call failed (recorded as failed; the model gets the text as an error). */
  isError?: boolean;
  /** Must match the tool's `outputSchema` when it declares one (not checked when `isError`). */
  structuredContent?: Record<string, unknown>;
  title?: string;
  metadata?: Record<string, unknown>;
}

export type ToolResult = TextResult | RichResult;

/** A tool handler: gets the model's input (already checked against `inputSchema`). */
export type ToolHandler<Input = any> = (input: Input) => ToolResult | Promise<ToolResult>;

export type ToolHandlers = Record<string, ToolHandler>;

// ---------------------------------------------------------------------------------------------
// Shared pieces

/** `console` of a pack: lines go to the runner's or controller's log, tagged with the pack. */
export interface PackConsole {
  log(...args: unknown[]): void;
  info(...args: unknown[]): void;
  debug(...args: unknown[]): void;
  warn(...args: unknown[]): void;
  error(...args: unknown[]): void;
}

/** A signal to record (the communication policy applies). */
export interface SignalRequest {
  kind: string;
  targetAgent?: string;
  targetChannel?: string;
  priority?: "P0" | "P1" | "P2" | "P3";
  /** An object; anything else is wrapped as `{value: x}`. */
  payload?: unknown;
  status?: string;
  usefulEffect?: boolean;
  /** ISO 8601: not delivered before this time. */
  notBefore?: string;
}

// ---------------------------------------------------------------------------------------------
// The runner context (runner.mjs, in the agent's container)

/** Like Node's `fs.Stats`. */
export interface Stats {
  dev: number;
  ino: number;
  mode: number;
  nlink: number;
  uid: number;
  gid: number;
  size: number;
  blksize: number;
  blocks: number;
  atimeMs: number;
  mtimeMs: number;
  ctimeMs: number;
  birthtimeMs: number;
  atime: Date;
  mtime: Date;
  ctime: Date;
  birthtime: Date;
  isFile(): boolean;
  isDirectory(): boolean;
  isSymbolicLink(): boolean;
  isFIFO(): boolean;
  isSocket(): boolean;
  isBlockDevice(): boolean;
  isCharacterDevice(): boolean;
}

/** An entry of `readdir(path, {withFileTypes: true})`. */
export interface Dirent {
  name: string;
  /** The directory read. */
  parentPath: string;
  path: string;
  isFile(): boolean;
  isDirectory(): boolean;
  isSymbolicLink(): boolean;
  isFIFO(): boolean;
  isSocket(): boolean;
  isBlockDevice(): boolean;
  isCharacterDevice(): boolean;
}

export type TextEncoding = "utf8" | "utf-8" | "base64" | "hex" | "latin1";

/**
 * Files in the container, confined like the `file.*` tools: reads under /workspace, /artifacts
 * and /mnt; writes under /workspace and /artifacts/<agent>. Relative paths resolve under
 * /workspace. Errors carry a Node `code` (ENOENT, EACCES, EISDIR, …).
 */
export interface ContainerFs {
  /** Text (UTF-8 by default), or bytes with `{encoding: null}` / `"buffer"`. At most 32 MiB. */
  readFile(path: string, options?: { encoding?: TextEncoding } | TextEncoding): Promise<string>;
  readFile(path: string, options: { encoding: null | "buffer" } | "buffer"): Promise<Uint8Array>;
  /** Atomic write (temporary file, rename). `flag: "a"` appends, `"wx"` refuses an existing file. */
  writeFile(
    path: string,
    data: string | Uint8Array,
    options?: { createDirs?: boolean; encoding?: TextEncoding; flag?: "w" | "a" | "wx" },
  ): Promise<void>;
  appendFile(path: string, data: string | Uint8Array, options?: { createDirs?: boolean; encoding?: TextEncoding }): Promise<void>;
  /** Sorted names, or entries with `{withFileTypes: true}`. */
  readdir(path: string, options?: { withFileTypes?: false }): Promise<string[]>;
  readdir(path: string, options: { withFileTypes: true }): Promise<Dirent[]>;
  stat(path: string): Promise<Stats>;
  exists(path: string): Promise<boolean>;
  mkdir(path: string, options?: { recursive?: boolean }): Promise<void>;
  /** Roots cannot be removed. */
  rm(path: string, options?: { recursive?: boolean; force?: boolean }): Promise<void>;
  rename(from: string, to: string): Promise<void>;
}

export interface ExecOptions {
  /** Working directory (a tool path; default /workspace). */
  cwd?: string;
  /** Added to (and overriding) `context.env`. */
  env?: Record<string, string>;
  /** Written to stdin, which is then closed (otherwise stdin is /dev/null). */
  input?: string | Uint8Array;
  /** Default 60 000, at most 600 000; the process group is killed on expiry. */
  timeoutMs?: number;
  /** Cap shared by stdout and stderr (default 1 MiB, at most 16 MiB). */
  maxOutputBytes?: number;
  /** `"buffer"`: stdout and stderr as bytes. */
  encoding?: "utf8" | "buffer";
}

export interface ExecResult<Out = string> {
  exitCode: number | null;
  /** The signal that ended the process, if one did. */
  signal: string | null;
  stdout: Out;
  stderr: Out;
  timedOut: boolean;
  truncated: boolean;
}

/** What the runner passes to `createRunnerToolpack`. */
export interface RunnerContext {
  /** The project's name. */
  readonly project: string;
  /** The agent whose container this is. */
  readonly agentId: string;
  /** The activation making the call (`null` while the pack loads). */
  readonly activationId: string | null;
  /** The agent's workspace as its tools see it (`/workspace`). */
  readonly workspace: string;
  /** This pack's id. */
  readonly toolpackId: string;
  /** Run this pack's controller-side handler for `tool` (input checked against its supportInputSchema). */
  callSupport(tool: string, input?: unknown): Promise<TextResult>;
  /** Record a signal as this agent. */
  recordSignal(signal: SignalRequest): Promise<unknown>;
  readonly console: PackConsole;
  readonly fs: ContainerFs;
  /** Run a program in the container (no shell: use `"sh", ["-c", script]`). A non-zero exit is a result. */
  exec(command: string, args?: string[], options?: ExecOptions & { encoding?: "utf8" }): Promise<ExecResult<string>>;
  exec(command: string, args: string[], options: ExecOptions & { encoding: "buffer" }): Promise<ExecResult<Uint8Array>>;
  /** Fired when the controller cancels the call; never while the pack loads. */
  readonly signal: AbortSignal;
  /** The agent's configured `env` plus SUZUMIO_PROJECT, SUZUMIO_AGENT and the image's PATH. */
  readonly env: Readonly<Record<string, string>>;
}

/** What `createRunnerToolpack` returns: `{tools: {...}}` or the handler map itself. */
export type RunnerToolpack = { tools: ToolHandlers } | ToolHandlers;

/**
 * `export function createRunnerToolpack(context)` (or `export default`). Called once at load
 * (every declared tool must have a handler) and again for every call, with that call's context.
 */
export type RunnerToolpackFactory = (context: RunnerContext) => RunnerToolpack | Promise<RunnerToolpack>;

// ---------------------------------------------------------------------------------------------
// The controller context (controller.mjs, in the controller)

export interface AgentSummary {
  id: string;
  role: string;
  displayName: string;
  status: string;
}

export interface AgentState extends AgentSummary {
  activeActivationId: string | null;
  updatedAt: string;
  modelAlive: boolean;
}

export interface MessageRequest {
  body: string;
  recipient?: string;
  channel?: string;
  priority?: "P0" | "P1" | "P2" | "P3";
  sender?: string;
  onBehalfOf?: string;
}

export interface ControllerStore {
  /** Sent as the calling agent in a support call (the policy applies). */
  sendMessage(message: MessageRequest): unknown;
  /** Throws the refusal when `sendMessage` would refuse this message now. */
  checkMessage(message: Partial<MessageRequest>): unknown;
  recordSignal(request: SignalRequest): unknown;
  listAgents(): AgentState[];
  listMessages(query?: { participantA?: string; participantB?: string; channel?: string; limit?: number; beforeId?: string }): unknown[];
  listSignals(query?: { targetAgent?: string; status?: string; kind?: string; limit?: number }): unknown[];
  projectStats(): Record<string, unknown>;
  /** The project's config without providers, keys or environment. */
  config(): Record<string, unknown>;
  readonly paths: { readonly root: string };
}

export interface ControllerState {
  /** A JSON document of `toolpack-state/<id>/`, or `null` when there is none. */
  read(name: string): any;
  /** Written atomically. */
  write(name: string, value: unknown): void;
}

export interface ControllerTime {
  /** ISO 8601. */
  now(): string;
  /** The next time a cron expression fires after `afterIso` (default now), or `null`. */
  nextCron(expr: string, timezone?: string, afterIso?: string): string | null;
  /** The name if it is a valid IANA time zone, else throws. */
  checkTimezone(timezone: string): string;
  /** At most 10 minutes. */
  sleep(ms: number): Promise<void>;
}

/** What the controller passes to the controller module's factories, hooks and handlers. */
export interface ControllerContext {
  readonly project: string;
  readonly toolpackId: string;
  /** Support calls and permission hooks: the calling agent (hooks: `{id}` only). */
  readonly agent?: AgentSummary;
  /** Support calls and permission hooks: the calling activation. */
  readonly activationId?: string;
  recordSignal(request: SignalRequest): unknown;
  readonly store: ControllerStore;
  readonly state: ControllerState;
  readonly time: ControllerTime;
  uuid(): string;
  readonly console: PackConsole;
}

/** The context of scheduler hooks (`schedulerTick`, `createSchedulerToolpack`). */
export interface SchedulerContext extends ControllerContext {
  /** The tick's time (ISO 8601). */
  readonly now: string;
  readonly agents: AgentState[];
  hasPendingSignals(): boolean;
  hasPendingSignalsForAgent(agentId: string, includeNotReady?: boolean): boolean;
}

/** What `createControllerToolpack` returns: `{support(tool, input)}`, `{tools: {...}}` or a handler map. */
export type ControllerToolpack =
  | { support(tool: string, input: any): TextResult | Promise<TextResult> }
  | { tools: Record<string, (input: any) => TextResult | Promise<TextResult>> }
  | Record<string, (input: any) => TextResult | Promise<TextResult>>;

/** `export function createControllerToolpack(context)` (or `export default`): runner `callSupport`s. */
export type ControllerToolpackFactory = (context: ControllerContext) => ControllerToolpack | Promise<ControllerToolpack>;

export type WebuiHandler = (input: any) => TextResult | Promise<TextResult>;

/** `{webui: {...}}`, `{tools: {...}}`, a handler map by entry id, or one function `(entryId, input)`. */
export type WebuiToolpack =
  | { webui: Record<string, WebuiHandler> }
  | { tools: Record<string, WebuiHandler> }
  | Record<string, WebuiHandler>
  | ((entryId: string, input: any) => TextResult | Promise<TextResult>);

/** `export function createWebuiToolpack(context)`; without it, a `webui` export or the default export is used. */
export type WebuiToolpackFactory = (context: ControllerContext) => WebuiToolpack | Promise<WebuiToolpack>;

/** What a scheduler hook returns: signals to record, or those and when to be called again. */
export type SchedulerTickResult = SignalRequest[] | { signals?: SignalRequest[]; wakeAt?: string } | null | undefined;

/** `export function schedulerTick(context)`: called on scheduler ticks. */
export type SchedulerTick = (context: SchedulerContext) => SchedulerTickResult | Promise<SchedulerTickResult>;

/** `export function createSchedulerToolpack(context)`: returns the tick function, or `{schedulerTick}` / `{tick}`. */
export type SchedulerToolpackFactory = (
  context: SchedulerContext,
) =>
  | SchedulerTick
  | { schedulerTick?: () => SchedulerTickResult | Promise<SchedulerTickResult>; tick?: () => SchedulerTickResult | Promise<SchedulerTickResult> }
  | Promise<unknown>;

// ---------------------------------------------------------------------------------------------
// Permission hooks (`permissions.hooks` in suzumio.yaml)

export interface HookCall {
  tool: string;
  input: any;
  callId: string;
}

/** Nothing (no opinion), a verdict for this call, or a changed input (checked against the schema again). */
export type BeforeToolCallResult =
  | null
  | undefined
  | { decision: "allow" | "ask" | "deny"; reason?: string }
  | { input: unknown };

/** `export async function beforeToolCall(context, call)`: 5 s, fails closed. */
export type BeforeToolCall = (context: ControllerContext, call: HookCall) => BeforeToolCallResult | Promise<BeforeToolCallResult>;

/** `export async function afterToolCall(context, call, result)`: returns the result the model gets. */
export type AfterToolCall = (
  context: ControllerContext,
  call: HookCall,
  result: ToolResult,
) => ToolResult | Promise<ToolResult>;
