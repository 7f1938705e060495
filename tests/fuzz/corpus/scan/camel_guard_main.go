// A write guarded by a key whose name is camelCase: deriveIdempotencyKey.
package main

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"net/http"

	"github.com/mark3labs/mcp-go/mcp"
)

var createOrder = mcp.NewTool("create_order",
	mcp.WithDescription("Creates an order with the supplier and reserves the stock."),
	mcp.WithString("sku", mcp.Required()),
)

func deriveIdempotencyKey(sku string, quantity int) string {
	sum := sha256.Sum256([]byte(sku + "/" + string(rune('0'+quantity))))
	return hex.EncodeToString(sum[:])
}

func placeOrder(client *http.Client, sku string, quantity int) error {
	req, err := http.NewRequest(http.MethodPost, "https://supplier.example/orders", bytes.NewBufferString(sku))
	if err != nil {
		return err
	}
	key := deriveIdempotencyKey(sku, quantity)
	req.Header.Set(`X-Request-Key`, key)
	_, err = client.Do(req)
	return err
}

func main() { _ = createOrder; _ = placeOrder }
