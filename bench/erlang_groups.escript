#!/usr/bin/env escript
%% -*- erlang -*-
%%! +sbwt none
%% Erlang/OTP peer of bench_groups (issue 33): the same two cases with OTP's
%% `supervisor`, so ratios are measured on the same machine in the same run
%% (scripts/bench.sh).
%%
%%   one_for_all N R  one supervisor (strategy one_for_all, intensity R + 10
%%                    per 1 s) with N static permanent worker children
%%                    (shutdown 5000). In round r of R, worker r rem N exits
%%                    abnormally, and the benchmark waits until the
%%                    supervisor has started every child again (it stops the
%%                    other N - 1 first, one by one in reverse order).
%%                    Reports milliseconds per restart and the growth of
%%                    RSS over the restarts. The peer of
%%                    `bench_groups --case=one_for_all --members=N
%%                    --restarts=R`.
%%   tree N [F]       a top supervisor of F supervisors of F supervisors of
%%                    N / F^2 workers each (10 x 10 x 100 by default), all
%%                    one_for_one: time from supervisor:start_link to its
%%                    return (every child started, in order), memory per
%%                    worker, and time from the exit signal `shutdown` (as
%%                    a parent supervisor stops a child) to the top
%%                    supervisor's exit. The peer of `bench_groups
%%                    --case=tree --members=N --fanout=F`.
%%
%% A worker is a plain process (proc_lib:spawn_link) waiting for a message;
%% its start function, run by the supervisor, counts the start in an ets
%% table and tells the benchmark when the count reaches the one it waits
%% for (as bench_groups's host counts `member_start`). Memory per worker is
%% measured two ways over the tree's start, each divided by N: the growth of
%% the VM's RSS (/proc/self/statm, as bench_groups measures its own) and of
%% erlang:memory(total) (everything the VM's allocators hand out: processes,
%% ets, binaries...).
%%
%% Each prints one `RESULT name=... key=value` line with the keys of
%% bench_groups's. Logging is off, as in erlang_peers.escript.
-mode(compile).
-export([init/1, start_worker/3]).

main(Args) ->
    logger:set_primary_config(level, none),
    run(Args).

run(["one_for_all", NS, RS]) ->
    case {list_to_integer(NS), list_to_integer(RS)} of
        {N, R} when N > 0, R > 0 -> one_for_all(N, R);
        _ -> usage()
    end;
run(["tree", NS]) ->
    tree(list_to_integer(NS), 10);
run(["tree", NS, FS]) ->
    tree(list_to_integer(NS), list_to_integer(FS));
run(_) ->
    usage().

usage() ->
    io:format(standard_error, "usage: erlang_groups.escript one_for_all N R "
              "(N, R > 0) | tree N [F]~n", []),
    halt(2).

%% --- one_for_all

one_for_all(N, R) ->
    T = counters(),
    PageSize = page_size(),
    Start = erlang:monotonic_time(),
    {ok, _Sup} = supervisor:start_link(?MODULE, {one_for_all, N, R, T, self()}),
    StartMs = ms_since(Start),
    Rss0 = rss(PageSize),
    All = erlang:monotonic_time(),
    Ms = [restart(T, N, I) || I <- lists:seq(0, R - 1)],
    TotalS = ms_since(All) / 1000,
    RssGrowth = max(0, rss(PageSize) - Rss0) / 1048576,
    Starts = ets:lookup_element(T, starts, 2),
    N * (R + 1) =:= Starts orelse halt(1),
    Mean = TotalS * 1000 / R,
    Sorted = lists:sort(Ms),
    P50 = lists:nth(min(R, R div 2 + 1), Sorted),
    Max = lists:last(Sorted),
    io:format("one_for_all, ~b children: started in ~.2f ms; ~b restarts in "
              "~.3f s, ~.3f ms each (p50 ~.3f, max ~.3f), ~.1f restarts/s; "
              "~b starts; RSS +~.1f MiB over the restarts~n",
              [N, StartMs, R, TotalS, Mean, P50, Max, R / TotalS, Starts,
               RssGrowth]),
    io:format("RESULT name=erlang_groups_one_for_all members=~b restarts=~b "
              "start_ms=~.2f seconds=~.4f ms_per_restart=~.3f p50_ms=~.3f "
              "max_ms=~.3f us_per_member=~.2f restarts_per_s=~.1f "
              "rss_growth_mib=~.1f otp=~s load1=~s~n",
              [N, R, StartMs, TotalS, Mean, P50, Max, Mean * 1000 / N,
               R / TotalS, RssGrowth, erlang:system_info(otp_release),
               load1()]).

%% One restart: worker I rem N fails; returns the milliseconds until every
%% child has been started again.
restart(T, N, I) ->
    Target = ets:lookup_element(T, starts, 2) + N,
    ets:insert(T, {target, Target}),
    [{_, Pid}] = ets:lookup(T, I rem N),
    T0 = erlang:monotonic_time(),
    Pid ! fail,
    receive reached -> ok end,
    ms_since(T0).

%% --- tree

tree(N, F) when F > 0, N rem (F * F) =:= 0 ->
    process_flag(trap_exit, true),
    Leaf = N div (F * F),
    T = counters(),
    PageSize = page_size(),
    %% Let the schedulers settle before the baseline (as bench_groups does).
    timer:sleep(200),
    Rss0 = rss(PageSize),
    Mem0 = erlang:memory(total),
    Start = erlang:monotonic_time(),
    {ok, Sup} = supervisor:start_link(?MODULE, {top, F, Leaf, T, self()}),
    StartMs = ms_since(Start),
    timer:sleep(100),
    Rss1 = rss(PageSize),
    Mem1 = erlang:memory(total),
    Starts = ets:lookup_element(T, starts, 2),
    N =:= Starts orelse halt(1),
    Stop = erlang:monotonic_time(),
    exit(Sup, shutdown),
    receive {'EXIT', Sup, shutdown} -> ok end,
    StopMs = ms_since(Stop),
    RssPer = round(max(0, Rss1 - Rss0) / N),
    MemPer = round(max(0, Mem1 - Mem0) / N),
    Groups = 1 + F + F * F,
    io:format("tree ~bx~bx~b (~b supervisors, ~b workers): started in ~.2f ms, "
              "stopped in ~.2f ms; RSS ~.1f -> ~.1f MiB (~b B per member), "
              "erlang:memory(total) ~.1f -> ~.1f MiB (~b B per member)~n",
              [F, F, Leaf, Groups, N, StartMs, StopMs, Rss0 / 1048576,
               Rss1 / 1048576, RssPer, Mem0 / 1048576, Mem1 / 1048576, MemPer]),
    io:format("RESULT name=erlang_groups_tree members=~b shape=~bx~bx~b "
              "groups=~b start_ms=~.2f stop_ms=~.2f rss_per_member_bytes=~b "
              "alloc_per_member_bytes=~b otp=~s load1=~s~n",
              [N, F, F, Leaf, Groups, StartMs, StopMs, RssPer, MemPer,
               erlang:system_info(otp_release), load1()]);
tree(_, _) ->
    io:format(standard_error, "erlang_groups.escript: N must be a multiple "
              "of F squared~n", []),
    halt(2).

%% --- supervisor callbacks

init({one_for_all, N, R, T, Bench}) ->
    {ok, {#{strategy => one_for_all, intensity => R + 10, period => 1},
          [worker(I, T, Bench) || I <- lists:seq(0, N - 1)]}};
init({top, F, Leaf, T, Bench}) ->
    {ok, {flags(),
          [group({g, I}, {mid, I, F, Leaf, T, Bench})
           || I <- lists:seq(0, F - 1)]}};
init({mid, I, F, Leaf, T, Bench}) ->
    {ok, {flags(),
          [group({g, I, J}, {low, (I * F + J) * Leaf, Leaf, T, Bench})
           || J <- lists:seq(0, F - 1)]}};
init({low, First, Leaf, T, Bench}) ->
    {ok, {flags(),
          [worker(K, T, Bench) || K <- lists:seq(First, First + Leaf - 1)]}}.

%% tasksup's default group intensity (3 per 60 s); no member fails here.
flags() ->
    #{strategy => one_for_one, intensity => 3, period => 60}.

group(Id, Arg) ->
    #{id => Id, start => {supervisor, start_link, [?MODULE, Arg]},
      restart => permanent, shutdown => infinity, type => supervisor}.

worker(I, T, Bench) ->
    #{id => I, start => {?MODULE, start_worker, [T, I, Bench]},
      restart => permanent, shutdown => 5000, type => worker}.

%% Run by the supervisor: a worker process, its pid kept for the benchmark,
%% and the start counted.
start_worker(T, I, Bench) ->
    Pid = proc_lib:spawn_link(fun worker_loop/0),
    ets:insert(T, {I, Pid}),
    case ets:update_counter(T, starts, 1) =:= ets:lookup_element(T, target, 2) of
        true -> Bench ! reached;
        false -> ok
    end,
    {ok, Pid}.

worker_loop() ->
    receive
        fail -> exit(failed)
    end.

%% --- helpers

counters() ->
    T = ets:new(counts, [public, set]),
    ets:insert(T, [{starts, 0}, {target, -1}]),
    T.

ms_since(T0) ->
    erlang:convert_time_unit(erlang:monotonic_time() - T0, native,
                             microsecond) / 1000.

page_size() ->
    list_to_integer(string:trim(os:cmd("getconf PAGESIZE"))).

rss(PageSize) ->
    {ok, Statm} = file:read_file("/proc/self/statm"),
    [_, Resident | _] = string:lexemes(binary_to_list(Statm), " \n"),
    list_to_integer(Resident) * PageSize.

load1() ->
    {ok, Load} = file:read_file("/proc/loadavg"),
    hd(string:lexemes(binary_to_list(Load), " ")).
