// lincheck: is a client-visible history of Bourse accounts linearizable? (issue 27)
//
// Input: a file of JSON lines, one completed operation each, as the cluster tests write
// them (crates/bourse/tests/support/cluster.rs, `History`):
//
//	{"client":0,"account":7,"op":"deposit","amount":2,"call":1200,"return":3400}
//	{"client":1,"account":7,"op":"read","balance":12,"call":1300,"return":2100}
//
// call and return are nanoseconds on one clock; every account starts at 0 and only
// these operations touch it. The model is an account balance: a deposit adds its amount,
// a read returns the balance. Porcupine checks each account on its own (a history is
// linearizable if and only if each account's is) and searches for an order of the
// operations that respects real time (one that returned before another was called comes
// first) in which every read returns the balance the model gives.
//
// Exit status: 0 linearizable, 1 not (a visualization is written to the second argument,
// when given), 2 bad input or the search timed out.
package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"time"

	"github.com/anishathalye/porcupine"
)

type record struct {
	Client  int    `json:"client"`
	Account uint32 `json:"account"`
	Op      string `json:"op"`
	Amount  int64  `json:"amount"`
	Balance int64  `json:"balance"`
	Call    int64  `json:"call"`
	Return  int64  `json:"return"`
}

type input struct {
	account uint32
	deposit bool
	amount  int64
}

// The model: an account's balance.
var model = porcupine.Model{
	Partition: func(history []porcupine.Operation) [][]porcupine.Operation {
		byAccount := map[uint32][]porcupine.Operation{}
		var order []uint32
		for _, op := range history {
			a := op.Input.(input).account
			if _, seen := byAccount[a]; !seen {
				order = append(order, a)
			}
			byAccount[a] = append(byAccount[a], op)
		}
		parts := make([][]porcupine.Operation, 0, len(order))
		for _, a := range order {
			parts = append(parts, byAccount[a])
		}
		return parts
	},
	Init: func() interface{} { return int64(0) },
	Step: func(state, in, out interface{}) (bool, interface{}) {
		balance := state.(int64)
		i := in.(input)
		if i.deposit {
			return true, balance + i.amount
		}
		return out.(int64) == balance, balance
	},
	DescribeOperation: func(in, out interface{}) string {
		i := in.(input)
		if i.deposit {
			return fmt.Sprintf("deposit(%d, %d)", i.account, i.amount)
		}
		return fmt.Sprintf("read(%d) -> %d", i.account, out.(int64))
	},
	DescribeState: func(state interface{}) string { return fmt.Sprintf("%d", state.(int64)) },
}

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: lincheck HISTORY.jsonl [VISUALIZATION.html]")
		os.Exit(2)
	}
	file, err := os.Open(os.Args[1])
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	defer file.Close()
	var history []porcupine.Operation
	accounts := map[uint32]bool{}
	scanner := bufio.NewScanner(file)
	for line := 1; scanner.Scan(); line++ {
		var r record
		if err := json.Unmarshal(scanner.Bytes(), &r); err != nil {
			fmt.Fprintf(os.Stderr, "line %d: %v\n", line, err)
			os.Exit(2)
		}
		if r.Return < r.Call || (r.Op != "deposit" && r.Op != "read") {
			fmt.Fprintf(os.Stderr, "line %d: not an operation: %s\n", line, scanner.Text())
			os.Exit(2)
		}
		accounts[r.Account] = true
		op := porcupine.Operation{ClientId: r.Client, Call: r.Call, Return: r.Return}
		if r.Op == "deposit" {
			op.Input, op.Output = input{account: r.Account, deposit: true, amount: r.Amount}, int64(0)
		} else {
			op.Input, op.Output = input{account: r.Account}, r.Balance
		}
		history = append(history, op)
	}
	if err := scanner.Err(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	started := time.Now()
	result, info := porcupine.CheckOperationsVerbose(model, history, 60*time.Second)
	took := time.Since(started)
	switch result {
	case porcupine.Ok:
		fmt.Printf("linearizable: %d operations on %d accounts (porcupine, %v)\n", len(history), len(accounts), took)
	case porcupine.Illegal:
		fmt.Printf("NOT linearizable: %d operations on %d accounts (porcupine, %v)\n", len(history), len(accounts), took)
		if len(os.Args) > 2 {
			if out, err := os.Create(os.Args[2]); err == nil {
				_ = porcupine.Visualize(model, info, out)
				out.Close()
				fmt.Printf("visualization: %s\n", os.Args[2])
			}
		}
		os.Exit(1)
	default:
		fmt.Printf("unknown: the search for %d operations timed out after %v\n", len(history), took)
		os.Exit(2)
	}
}
