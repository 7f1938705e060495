"""A tool named like a payment that only builds a link for a person to pay."""
from urllib.parse import urlencode

from mcp.server.fastmcp import FastMCP

mcp = FastMCP("checkout")
CHECKOUT = 'https://pay.example/checkout'


@mcp.tool()
def create_payment_link(order_id: str, amount_cents: int) -> str:
    """Create a payment link for an order. The customer opens it to pay;
    this tool charges nothing, it builds the URL."""
    return CHECKOUT + "?" + urlencode({"order": order_id, "amount": amount_cents})


@mcp.tool()
def get_order_status(order_id: str) -> str:
    """Returns the status of an order."""
    return f"order {order_id}: open"
